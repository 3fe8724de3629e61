import { saveCompileCache, startCompileCache } from './compile-cache.ts';
import type { Server } from './server.ts';
import type { LoadedFile } from './bootstrap/load.ts';

/**
 * What SIGTERM and SIGINT do; main() takes over once it has a logger and a server to close. Installed before the
 * modules load, most of a start's time (seconds on a loaded machine with a cold compile cache): without a listener
 * Node's own handler re-raises the signal, which as PID 1 in a container has no default action, so a stop signal that
 * came before main() installed its handlers was lost and the server started anyway, to be killed when the stop timed
 * out. With one, the signal is kept and handled at the event loop's next turn (loading the modules does not yield to
 * it), usually by main()'s stop; one handled earlier finds nothing open and ends the process with the code of a stop
 * (EXIT.stopped, whose module is not loaded yet).
 */
let onStopSignal: (signal: NodeJS.Signals) => void = () => process.exit(0);
// `on`, not `once`: with its last listener gone Node restores the default action, and a second signal while the close
// runs (an orchestrator or a harness sending it twice, Ctrl-C twice) would kill the process by that signal instead of
// letting the close finish and exit 0.
process.on('SIGINT', () => onStopSignal('SIGINT'));
process.on('SIGTERM', () => onStopSignal('SIGTERM'));

// Before the rest is loaded (hence the dynamic imports): every module below is stripped and compiled through the cache.
startCompileCache();
const { VERSION } = await import('./core/version.ts');
const { createLogger } = await import('./logger.ts');
const { createServer } = await import('./server.ts');
const { loadSettings, storageUrl } = await import('./settings.ts');
const { EXIT, listenFailure, notice, startupFailure, usage } = await import('./startup.ts');

/**
 * Exit codes (startup.ts lists them): a failure to start is one line on stderr and its code, never a stack trace. A
 * database lost while running is waited for, not exited on; a store that failed outright exits 4 for a restart.
 */
const EXIT_STORAGE_FAILED = EXIT.storageFailed;
const EXIT_BOOTSTRAP_FAILED = EXIT.bootstrap;
/**
 * From a storage failure to the exit: requests keep getting their 503 meanwhile and the fatal line reaches the
 * log. Short, because nothing served in between can be right.
 */
const STORAGE_FAILURE_GRACE_MS = 2000;
/** The longest a start waits for a first request before it loads the engines anyway (afterFirstAnswer). */
const FINISH_START_AFTER_MS = 1000;

/** One line on stderr and the exit code; nothing after it runs. */
function fail({ code, line }: { code: number; line: string }): never {
  process.stderr.write(`strongroom: ${line}\n`);
  process.exit(code);
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage());
    return;
  }
  if (argv.includes('--version')) {
    process.stdout.write(`strongroom ${VERSION}\n`);
    return;
  }
  let settings;
  try {
    settings = loadSettings(process.env, argv);
  } catch (err) {
    fail(startupFailure(err));
  }
  const logger = createLogger(settings.STRONGROOM_LOG_LEVEL);
  // Taken over before anything slow (unseal, waiting for a peer or the database, the bootstrap): from here a stop
  // signal closes what start-up has opened.
  let server: Server | undefined;
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal, starting: !server }, 'shutting down');
    // Start-up is crash-safe (every step survives kill -9), so one cut short needs no more than the close.
    await server?.close();
    logger.info({ signal }, 'strongroom stopped');
    process.exit(EXIT.stopped);
  };
  // A repeated signal is a no-op (`stopping`).
  onStopSignal = (signal) => void stop(signal);
  const bootstrapFile = settings.STRONGROOM_BOOTSTRAP;
  // Loaded only with a file to apply: the YAML parser and the bootstrap's schemas are no part of a plain start.
  const bootstrapRun = bootstrapFile ? await import('./bootstrap/run.ts') : undefined;
  let bootstrap: LoadedFile | undefined;
  if (bootstrapFile && bootstrapRun) {
    const { BootstrapInvalidError, loadBootstrapFile, loadOptions } = bootstrapRun;
    // Checked whole before the store is even opened: an invalid file changes nothing.
    try {
      bootstrap = loadBootstrapFile(bootstrapFile, loadOptions(settings));
    } catch (err) {
      if (!(err instanceof BootstrapInvalidError)) fail(startupFailure(err));
      process.stderr.write(`strongroom: invalid bootstrap file ${err.message}\n${err.lines().map((l) => `  ${l}\n`).join('')}`);
      process.exit(EXIT.settings);
    }
  }
  try {
    // The engines' modules load once the process listens (finishStart below): a request for one of their mounts
    // meanwhile waits for its backend, so a 200 from sys/health still means the server serves (docs/architecture.md).
    server = await createServer(settings, logger, { listenFirst: true });
  } catch (err) {
    fail(startupFailure(err));
  }
  // Shown before anything else can fail (the bootstrap, the listener): a start that fails after initialising the
  // store has still handed over its root token. sys/generate-root makes another from the unseal key.
  if (server.generatedKeyFile) {
    process.stderr.write(notice('NO UNSEAL KEY WAS GIVEN: ONE WAS GENERATED', [
      `into ${server.generatedKeyFile}, beside the data it opens. Without it the data is lost for good.`,
      'Back it up now, keep the copy apart from the data, and set STRONGROOM_UNSEAL_KEY_FILE to it in production',
      '(make one yourself with: openssl rand -base64 32 > unseal.key).',
    ]));
  }
  if (storageUrl(settings) === 'memory') {
    process.stderr.write(notice(settings.STRONGROOM_DEV ? 'DEV MODE: NOTHING IS KEPT' : 'MEMORY STORAGE: NOTHING IS KEPT', [
      'Every secret, token, policy and mount lives in this process only and is lost when it stops.',
      'Not for production: set STRONGROOM_STORAGE (sqlite:<path> or postgres://...) to keep data.',
    ]));
  }
  if (server.rootToken) {
    // Printed once, to the terminal only: the token is never logged.
    process.stdout.write(`\nStrongroom initialised. Root token (shown once, store it safely):\n\n    ${server.rootToken}\n\n`);
  }
  if (bootstrapFile && bootstrap && bootstrapRun) {
    try {
      await bootstrapRun.applyAndLog(server.core, bootstrapFile, bootstrap, logger);
    } catch (err) {
      // A stop signal closed the store under the apply: that stop ends the process.
      if (stopping) return;
      process.stderr.write(`strongroom: the bootstrap could not be applied: ${(err as Error).message}\n`);
      await server.close();
      process.exit(err instanceof bootstrapRun.BootstrapApplyError ? EXIT_BOOTSTRAP_FAILED : 1);
    }
  }
  const reapply = bootstrapFile && bootstrapRun ? bootstrapRun.reloader(server.core, bootstrapFile, bootstrapRun.loadOptions(settings), logger) : undefined;
  // Log rotation: file audit devices reopen their files, nothing else (without a handler, SIGHUP would end the
  // process). Re-applying the bootstrap file is its own signal: logrotate must not undo a revocation (docs/bootstrap.md).
  process.on('SIGHUP', () => void server.core.audit.reopen());
  process.on('SIGUSR2', () => {
    if (reapply) void reapply();
    else logger.warn('SIGUSR2 re-applies a bootstrap file, and none is set (STRONGROOM_BOOTSTRAP): nothing was done');
  });
  server.storage.onFailure((err) => {
    logger.fatal({ reason: err.message, exitCode: EXIT_STORAGE_FAILED, graceMs: STORAGE_FAILURE_GRACE_MS }, 'storage failed: every request is refused with 503 and the process exits for a restart');
    setTimeout(() => process.exit(EXIT_STORAGE_FAILED), STORAGE_FAILURE_GRACE_MS);
  });
  server.storage.onAvailability?.((lost) => {
    if (lost) logger.error({ reason: lost.message }, 'storage unreachable: requests that need it get 503 until it is back');
    else logger.info('storage reachable again');
  });
  const [host, port] = splitAddr(settings.STRONGROOM_ADDR);
  try {
    await server.app.listen({ host, port });
  } catch (err) {
    await server.close();
    fail(listenFailure(err, settings.STRONGROOM_ADDR));
  }
  logger.info({ addr: settings.STRONGROOM_ADDR, tls: Boolean(settings.STRONGROOM_TLS_CERT_FILE), dev: settings.STRONGROOM_DEV }, 'strongroom listening');
  await afterFirstAnswer(server);
  // A backend that fails to start is logged and refuses its mount's requests (503); the process serves the rest.
  await server.finishStart();
  // After finishStart, so that the cache holds the engines' modules too.
  saveCompileCache();
}

/**
 * When the rest of the start runs: once the first request has been answered (usually a health check, which needs
 * none of it), or a second after listening if none comes. Loading the engines takes the thread for ~0.1–0.2 s without
 * a compile cache; a request for one of their mounts meanwhile starts its backend itself and waits for it.
 */
function afterFirstAnswer({ app }: Server): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, FINISH_START_AFTER_MS);
    app.server.once('request', (_req, res) => res.once('close', () => {
      clearTimeout(timer);
      setImmediate(resolve);
    }));
  });
}

function splitAddr(addr: string): [string, number] {
  const i = addr.lastIndexOf(':');
  return [addr.slice(0, i).replace(/^\[|\]$/g, ''), Number(addr.slice(i + 1))];
}

// A failure of the start itself is one line too; once listening, nothing is left to reject here.
await main().catch((err: unknown) => fail(startupFailure(err)));
