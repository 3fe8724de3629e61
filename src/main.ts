import { UnsealError } from './core/barrier.ts';
import { createLogger } from './logger.ts';
import { createServer, StartupError } from './server.ts';
import { loadSettings, SettingsError } from './settings.ts';

/** Exit codes: 0 clean stop, 2 bad settings, 3 wrong unseal key, 1 anything else. */
async function main(): Promise<void> {
  let settings;
  try {
    settings = loadSettings(process.env, process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`strongroom: invalid settings: ${(err as Error).message}\n`);
    process.exit(2);
  }
  const logger = createLogger(settings.STRONGROOM_LOG_LEVEL);
  let server;
  try {
    server = await createServer(settings, logger);
  } catch (err) {
    if (err instanceof UnsealError) {
      process.stderr.write(`strongroom: cannot unseal the store: ${err.message}. Nothing was changed.\n`);
      process.exit(3);
    }
    if (err instanceof StartupError) {
      process.stderr.write(`strongroom: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
  if (server.rootToken) {
    // Printed once, to the terminal only: the token is never logged and cannot be recovered later.
    process.stdout.write(`\nStrongroom initialised. Root token (shown once, store it safely):\n\n    ${server.rootToken}\n\n`);
  }
  const [host, port] = splitAddr(settings.STRONGROOM_ADDR);
  await server.app.listen({ host, port });
  logger.info({ addr: settings.STRONGROOM_ADDR, tls: Boolean(settings.STRONGROOM_TLS_CERT_FILE), dev: settings.STRONGROOM_DEV }, 'strongroom listening');
  const stop = async (signal: string) => {
    logger.info({ signal }, 'shutting down');
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
}

function splitAddr(addr: string): [string, number] {
  const i = addr.lastIndexOf(':');
  return [addr.slice(0, i).replace(/^\[|\]$/g, ''), Number(addr.slice(i + 1))];
}

await main();
