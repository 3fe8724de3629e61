import { UnsealError } from './core/barrier.ts';
import { StorageUnavailableError } from './core/storage/types.ts';
import { createLogger } from './logger.ts';
import { createServer, StartupError, type Server } from './server.ts';
import { loadSettings, SettingsError } from './settings.ts';
import { applyAndLog, BootstrapApplyError, BootstrapInvalidError, loadOptions, reloader } from './bootstrap/run.ts';
import { loadBootstrapFile, type LoadedFile } from './bootstrap/load.ts';

/**
 * Exit codes: 0 clean stop, 2 bad settings, 3 wrong unseal key, 4 storage failed while running (the supervisor
 * should restart the server), 5 the storage's database could not be reached at start (start again once it is up;
 * a database lost later is waited for, not exited on), 6 the bootstrap file could not be applied (what was applied
 * before the failure stays; an invalid file is 2 and changes nothing), 1 anything else.
 */
const EXIT_STORAGE_FAILED = 4;
const EXIT_STORAGE_UNREACHABLE = 5;
const EXIT_BOOTSTRAP_FAILED = 6;
/**
 * From a storage failure to the exit: requests keep getting their 503 meanwhile and the fatal line reaches the
 * log. Short, because nothing served in between can be right.
 */
const STORAGE_FAILURE_GRACE_MS = 2000;

async function main(): Promise<void> {
  let settings;
  try {
    settings = loadSettings(process.env, process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`strongroom: invalid settings: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const logger = createLogger(settings.STRONGROOM_LOG_LEVEL);
  // Installed before anything slow (unseal, waiting for a peer or the database, the bootstrap): as PID 1 in a
  // container Node gets no default handler, so a stop signal during start-up would otherwise be ignored until killed.
  let server: Server | undefined;
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, starting: !server }, 'shutting down');
    // Start-up is crash-safe (every step survives kill -9), so one cut short needs no more than the close.
    await server?.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
  const bootstrapFile = settings.STRONGROOM_BOOTSTRAP;
  let bootstrap: LoadedFile | undefined;
  if (bootstrapFile) {
    // Checked whole before the store is even opened: an invalid file changes nothing.
    try {
      bootstrap = loadBootstrapFile(bootstrapFile, loadOptions(settings));
    } catch (err) {
      if (!(err instanceof BootstrapInvalidError)) throw err;
      process.stderr.write(`strongroom: invalid bootstrap file ${err.message}\n${err.lines().map((l) => `  ${l}\n`).join('')}`);
      process.exit(2);
    }
  }
  try {
    server = await createServer(settings, logger);
  } catch (err) {
    if (err instanceof UnsealError) {
      process.stderr.write(`strongroom: cannot unseal the store: ${err.message}. Nothing was changed.\n`);
      process.exit(3);
    }
    if (err instanceof StorageUnavailableError) {
      process.stderr.write(`strongroom: ${err.message}. Start again once the database is reachable.\n`);
      process.exit(EXIT_STORAGE_UNREACHABLE);
    }
    if (err instanceof StartupError) {
      process.stderr.write(`strongroom: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  if (bootstrapFile && bootstrap) {
    try {
      await applyAndLog(server.core, bootstrapFile, bootstrap, logger);
    } catch (err) {
      // A stop signal closed the store under the apply: that stop ends the process.
      if (stopping) return;
      process.stderr.write(`strongroom: the bootstrap could not be applied: ${(err as Error).message}\n`);
      await server.close();
      process.exit(err instanceof BootstrapApplyError ? EXIT_BOOTSTRAP_FAILED : 1);
    }
  }
  const reapply = bootstrapFile ? reloader(server.core, bootstrapFile, loadOptions(settings), logger) : undefined;
  // Log rotation: file audit devices reopen their files, nothing else (without a handler, SIGHUP would end the
  // process). Re-applying the bootstrap file is its own signal: logrotate must not undo a revocation (docs/bootstrap.md).
  process.on('SIGHUP', () => void server.core.audit.reopen());
  process.on('SIGUSR2', () => {
    if (reapply) void reapply();
    else logger.warn('SIGUSR2 re-applies a bootstrap file, and none is set (STRONGROOM_BOOTSTRAP): nothing was done');
  });
  if (server.rootToken) {
    // Printed once, to the terminal only: the token is never logged and cannot be recovered later.
    process.stdout.write(`\nStrongroom initialised. Root token (shown once, store it safely):\n\n    ${server.rootToken}\n\n`);
  }
  server.storage.onFailure((err) => {
    logger.fatal({ reason: err.message, exitCode: EXIT_STORAGE_FAILED, graceMs: STORAGE_FAILURE_GRACE_MS }, 'storage failed: every request is refused with 503 and the process exits for a restart');
    setTimeout(() => process.exit(EXIT_STORAGE_FAILED), STORAGE_FAILURE_GRACE_MS);
  });
  server.storage.onAvailability?.((lost) => {
    if (lost) logger.error({ reason: lost.message }, 'storage unreachable: requests that need it get 503 until it is back');
    else logger.info('storage reachable again');
  });
  const [host, port] = splitAddr(settings.STRONGROOM_ADDR);
  await server.app.listen({ host, port });
  logger.info({ addr: settings.STRONGROOM_ADDR, tls: Boolean(settings.STRONGROOM_TLS_CERT_FILE), dev: settings.STRONGROOM_DEV }, 'strongroom listening');
}

function splitAddr(addr: string): [string, number] {
  const i = addr.lastIndexOf(':');
  return [addr.slice(0, i).replace(/^\[|\]$/g, ''), Number(addr.slice(i + 1))];
}

await main();
