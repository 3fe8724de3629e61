// Vitest global setup: make a CA and a 127.0.0.1/localhost server certificate once per run.
// Node reads NODE_EXTRA_CA_CERTS only at process start, so it is set here, before the forked test
// workers start (they inherit the environment); each test file then starts its own emulator with them.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateTls } from './ca.ts';
import { TLS_CERT_ENV, TLS_KEY_ENV } from './server.ts';

export default async function setup(): Promise<() => Promise<void>> {
  const dir = await mkdtemp(join(tmpdir(), 'strongroom-azure-tls-'));
  const tls = await generateTls(dir);
  // NODE_EXTRA_CA_CERTS names one file; keep a CA another setup already installed.
  const previous = process.env.NODE_EXTRA_CA_CERTS;
  let caFile = tls.caCertPath;
  if (previous) {
    caFile = join(dir, 'ca-bundle.crt');
    await writeFile(caFile, `${await readFile(previous, 'utf8')}\n${await readFile(tls.caCertPath, 'utf8')}`);
  }
  process.env.NODE_EXTRA_CA_CERTS = caFile;
  process.env[TLS_CERT_ENV] = tls.certPath;
  process.env[TLS_KEY_ENV] = tls.keyPath;
  return async () => {
    await rm(dir, { recursive: true, force: true });
  };
}
