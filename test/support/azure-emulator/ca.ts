// Test-only certificate authority made with the openssl CLI, so the emulator's HTTPS is verified
// by the real TLS stack (through NODE_EXTRA_CA_CERTS) instead of switching verification off.
import { execFile } from 'node:child_process';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

export interface TlsMaterial {
  dir: string;
  caCertPath: string;
  caKeyPath: string;
  certPath: string;
  keyPath: string;
}

export interface GenerateTlsOptions {
  /** Names the server certificate covers; IPs become IP SANs. */
  hosts?: string[];
  days?: number;
}

export async function generateTls(dir: string, options: GenerateTlsOptions = {}): Promise<TlsMaterial> {
  const hosts = options.hosts ?? ['127.0.0.1', 'localhost'];
  const days = String(options.days ?? 7);
  await mkdir(dir, { recursive: true });
  const m: TlsMaterial = {
    dir,
    caCertPath: join(dir, 'ca.crt'),
    caKeyPath: join(dir, 'ca.key'),
    certPath: join(dir, 'server.crt'),
    keyPath: join(dir, 'server.key'),
  };
  const csrPath = join(dir, 'server.csr');
  const extPath = join(dir, 'server.ext');
  const san = hosts.map((h) => (/^[\d.]+$|:/.test(h) ? `IP:${h}` : `DNS:${h}`)).join(',');
  await writeFile(
    extPath,
    [
      `subjectAltName=${san}`,
      'basicConstraints=CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      'extendedKeyUsage=serverAuth',
    ].join('\n') + '\n',
  );
  await run('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-sha256', '-days', days,
    '-keyout', m.caKeyPath, '-out', m.caCertPath,
    '-subj', '/CN=Strongroom Azure emulator test CA',
    '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  await run('openssl', [
    'req', '-newkey', 'rsa:2048', '-nodes', '-sha256',
    '-keyout', m.keyPath, '-out', csrPath, '-subj', `/CN=${hosts[0]}`,
  ]);
  await run('openssl', [
    'x509', '-req', '-sha256', '-days', days, '-in', csrPath,
    '-CA', m.caCertPath, '-CAkey', m.caKeyPath, '-CAcreateserial',
    '-out', m.certPath, '-extfile', extPath,
  ]);
  return m;
}
