/**
 * The bootstrap in the server's life: the file is checked before the store is opened, applied after unseal, and
 * checked and applied again on SIGUSR2 (one run at a time; a signal during a run asks for one more run after it).
 * SIGHUP is logrotate's and only reopens audit files: a nightly rotation must not re-apply anything.
 */
import type { Logger } from 'pino';
import type { Core } from '../core/core.ts';
import { auditSettings, type Settings } from '../settings.ts';
import { applyBootstrap, BootstrapApplyError, type BootstrapReport } from './apply.ts';
import { BootstrapInvalidError, loadBootstrapFile, type LoadedFile, type LoadOptions } from './load.ts';

export { BootstrapApplyError, BootstrapInvalidError, loadBootstrapFile };

export function loadOptions(settings: Settings): LoadOptions {
  return {
    allowTokenIds: settings.STRONGROOM_DEV || settings.STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS,
    audit: auditSettings(settings),
  };
}

/** Applies a checked file and logs what it did: names and counts, never a value. */
export async function applyAndLog(core: Core, file: string, loaded: LoadedFile, logger: Logger): Promise<BootstrapReport> {
  try {
    const report = await applyBootstrap(core, loaded);
    logger.info({ file, ...summary(report) }, 'bootstrap applied');
    if (report.skipped.length) logger.warn({ file, skipped: report.skipped }, 'bootstrap skipped declared objects revoked, deleted or disabled outside the file; change their declaration (a token: its id) to create them again');
    return report;
  } catch (err) {
    if (err instanceof BootstrapApplyError) logger.error({ file, reason: err.message, ...summary(err.report) }, 'bootstrap stopped at its first failure: what is listed as created, changed, removed or disabled was applied, nothing after it');
    throw err;
  }
}

function summary(r: BootstrapReport) {
  return {
    counts: { created: r.created.length, changed: r.changed.length, unchanged: r.unchanged.length, removed: r.removed.length, skipped: r.skipped.length, disabled: r.disabled.length },
    created: r.created, changed: r.changed, unchanged: r.unchanged, removed: r.removed, skipped: r.skipped, disabled: r.disabled,
  };
}

/** SIGUSR2: the file is read and checked again (file references too); an invalid file is logged and changes nothing. */
export function reloader(core: Core, file: string, options: LoadOptions, logger: Logger): () => Promise<void> {
  let running: Promise<void> | undefined;
  let again = false;
  const once = async () => {
    let loaded: LoadedFile;
    try {
      loaded = loadBootstrapFile(file, options);
    } catch (err) {
      // Nothing awaits a signal's run: an error thrown from here would end the server as an unhandled rejection.
      if (err instanceof BootstrapInvalidError) logger.error({ file, errors: err.lines() }, 'bootstrap file is invalid: nothing was changed');
      else logger.error({ file, reason: (err as Error).message }, 'bootstrap file could not be checked: nothing was changed');
      return;
    }
    await applyAndLog(core, file, loaded, logger).catch((err) => {
      if (!(err instanceof BootstrapApplyError)) logger.error({ file, reason: (err as Error).message }, 'bootstrap failed');
    });
  };
  return async () => {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      do {
        again = false;
        await once();
      } while (again);
    })().finally(() => (running = undefined));
    return running;
  };
}
