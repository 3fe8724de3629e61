import { afterEach, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Writable } from 'node:stream';
import { createLogger } from '../../src/logger.ts';
import { createServer, resolveUnsealKey } from '../../src/server.ts';
import { auditDirectory, loadSettings, SettingsError } from '../../src/settings.ts';

const run = promisify(execFile);
const dirs: string[] = [];
afterEach(() => {
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});
const freshDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'strongroom-settings-'));
  dirs.push(d);
  return d;
};

describe('settings', () => {
  it('"every setting has a default; flags override the environment"', () => {
    const s = loadSettings({ STRONGROOM_LOG_LEVEL: 'warn' }, ['--log-level=error', '--max-request-size', '1024', '--dev']);
    expect(s).toMatchObject({ STRONGROOM_ADDR: '127.0.0.1:8200', STRONGROOM_LOG_LEVEL: 'error', STRONGROOM_MAX_REQUEST_SIZE: 1024, STRONGROOM_DEV: true, STRONGROOM_DEFAULT_LEASE_TTL: 2_764_800 });
    expect(loadSettings({}, [])).toMatchObject({
      STRONGROOM_MAX_REQUEST_SIZE: 32 * 1024 * 1024, STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE: 1024 * 1024,
      STRONGROOM_HEADERS_TIMEOUT: 10, STRONGROOM_REQUEST_TIMEOUT: 60, STRONGROOM_KEEP_ALIVE_TIMEOUT: 72,
    });
  });

  it.each([
    [{ STRONGROOM_ADDR: 'nohost' }, [], /STRONGROOM_ADDR: expected host:port/],
    [{ STRONGROOM_STORAGE: 'redis://x' }, [], /STRONGROOM_STORAGE/],
    [{ STRONGROOM_DEFAULT_LEASE_TTL: '800h' }, [], /must not exceed STRONGROOM_MAX_LEASE_TTL/],
    [{ STRONGROOM_TLS_CERT_FILE: '/x' }, [], /go together/],
    [{}, ['--no-such-flag'], /unknown flag --no-such-flag/],
    [{ STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE: '0' }, [], /STRONGROOM_MAX_UNAUTHENTICATED_REQUEST_SIZE/],
    [{ STRONGROOM_REQUEST_TIMEOUT: '0' }, [], /STRONGROOM_REQUEST_TIMEOUT must be between 1s and 1h/],
    [{ STRONGROOM_KEEP_ALIVE_TIMEOUT: '2h' }, [], /STRONGROOM_KEEP_ALIVE_TIMEOUT must be between 1s and 1h/],
    [{ STRONGROOM_HEADERS_TIMEOUT: '90s' }, [], /STRONGROOM_HEADERS_TIMEOUT must not exceed STRONGROOM_REQUEST_TIMEOUT/],
  ])('"a bad setting is refused naming it" %#', (env, argv, message) => {
    expect(() => loadSettings(env as NodeJS.ProcessEnv, argv as string[])).toThrow(SettingsError);
    expect(() => loadSettings(env as NodeJS.ProcessEnv, argv as string[])).toThrow(message);
  });

  it('"without an unseal key one is generated into a 0600 file beside the data, with a loud warning"', () => {
    const dir = freshDir();
    let logged = '';
    const sink = new Writable({ write(chunk, _enc, done) { logged += chunk; done(); } });
    const settings = loadSettings({ STRONGROOM_STORAGE: `sqlite:${join(dir, 'db', 'strongroom.db')}` }, []);
    const { key, generated } = resolveUnsealKey(settings, createLogger('info', sink));
    const file = join(dir, 'db', 'unseal.key');
    expect(generated).toBe(file);
    expect(existsSync(file)).toBe(true);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(Buffer.from(readFileSync(file, 'utf8').trim(), 'base64').equals(key)).toBe(true);
    expect(logged).toMatch(/No unseal key was given/);
    expect(logged).not.toContain(key.toString('base64'));
    expect(resolveUnsealKey(settings, createLogger('silent')).key.equals(key)).toBe(true);
  });

  it('"file audit devices write only in the audit directory": audit/ beside the SQLite database unless set; a relative setting is made absolute', () => {
    expect(auditDirectory(loadSettings({ STRONGROOM_STORAGE: 'sqlite:/srv/strongroom/strongroom.db' }, []))).toBe('/srv/strongroom/audit');
    expect(auditDirectory(loadSettings({ STRONGROOM_STORAGE: 'memory' }, []))).toBe(resolve('data', 'audit'));
    expect(auditDirectory(loadSettings({ STRONGROOM_AUDIT_DIR: 'logs/audit' }, []))).toBe(resolve('logs', 'audit'));
    expect(auditDirectory(loadSettings({}, ['--audit-dir', '/var/log/strongroom']))).toBe('/var/log/strongroom');
  });
});

describe('the HTTPS listener', () => {
  it('"serves the API over TLS with the configured certificate"', async () => {
    const dir = freshDir();
    await run('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')]);
    const settings = loadSettings({ STRONGROOM_DEV: '1', STRONGROOM_LOG_LEVEL: 'silent', STRONGROOM_TLS_CERT_FILE: join(dir, 'cert.pem'), STRONGROOM_TLS_KEY_FILE: join(dir, 'key.pem') }, []);
    const server = await createServer(settings, createLogger('silent'));
    try {
      const url = await server.app.listen({ host: '127.0.0.1', port: 0 });
      expect(url).toMatch(/^https:/);
      const { stdout } = await run('curl', ['-s', '--cacert', join(dir, 'cert.pem'), `${url}/v1/sys/health`]);
      expect(JSON.parse(stdout)).toMatchObject({ initialized: true, sealed: false });
    } finally {
      await server.close();
    }
  });
});
