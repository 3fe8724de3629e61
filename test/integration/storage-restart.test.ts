import { afterEach, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';
import { UnsealError } from '../../src/core/barrier.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const backends = { secret: { test: testBackend(new Map<string, TestBackendProbe>()) }, auth: {} };
const open: TestServer[] = [];
const dirs: string[] = [];
afterEach(async () => {
  while (open.length) await open.pop()!.close().catch(() => undefined);
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-restart-'));
  dirs.push(dir);
  return dir;
}

async function server(dataDir: string, unsealKey: string) {
  const s = await startTestServer({ storage: 'sqlite', dataDir, unsealKey, backends });
  open.push(s);
  return s;
}

describe('SQLite storage across restarts', () => {
  it('"a restart on SQLite keeps mounts, tokens, policies and leases"', async () => {
    const key = randomBytes(32).toString('base64');
    const first = await server(freshDir(), key);
    const dir = first.dataDir;
    await first.request('POST', 'sys/mounts/kept', { body: { type: 'test' } });
    await first.request('POST', 'kept/data/item', { body: { value: 'still here' } });
    await first.request('PUT', 'sys/policies/acl/kept', { body: { policy: 'path "kept/*" { capabilities = ["read"] }' } });
    const token = (await first.request('POST', 'auth/token/create', { body: { policies: ['kept'] } })).body.auth.client_token;
    const { lease_id } = (await first.request('GET', 'kept/creds/c')).body;
    await first.close();
    open.pop();

    const second = await startTestServer({ storage: 'sqlite', dataDir: dir, unsealKey: key, backends });
    open.push(second);
    expect((await second.request('GET', 'kept/data/item', { token })).body.data.value).toBe('still here');
    expect((await second.request('GET', 'sys/mounts')).body.data['kept/'].type).toBe('test');
    expect((await second.request('PUT', 'sys/leases/lookup', { body: { lease_id } })).body.data.id).toBe(lease_id);
    expect((await second.request('GET', 'sys/mounts', { token })).status).toBe(403);
  });

  it('"a wrong unseal key refuses to start and alters nothing"', async () => {
    const first = await server(freshDir(), randomBytes(32).toString('base64'));
    const dir = first.dataDir;
    await first.close();
    open.pop();
    const before = readFileSync(join(dir, 'strongroom.db'));
    await expect(startTestServer({ storage: 'sqlite', dataDir: dir, unsealKey: randomBytes(32).toString('base64'), backends })).rejects.toBeInstanceOf(UnsealError);
    expect(readFileSync(join(dir, 'strongroom.db')).equals(before)).toBe(true);
  });

  it('"the server process exits with code 3 and a clear message on a wrong key"', async () => {
    const first = await server(freshDir(), randomBytes(32).toString('base64'));
    const dir = first.dataDir;
    await first.close();
    open.pop();
    const run = promisify(execFile)(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/main.ts'], {
      env: { ...process.env, STRONGROOM_STORAGE: `sqlite:${join(dir, 'strongroom.db')}`, STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64'), STRONGROOM_ADDR: '127.0.0.1:0' },
    });
    const err = await run.then(() => undefined, (e: { code: number; stderr: string }) => e);
    expect(err?.code).toBe(3);
    expect(err?.stderr).toMatch(/cannot unseal the store: .*wrong key/);
  });

  it('"no plaintext secret or token appears in the SQLite files"', async () => {
    const s = await server(freshDir(), randomBytes(32).toString('base64'));
    const marker = `needle-${randomBytes(8).toString('hex')}`;
    await s.request('POST', 'sys/mounts/plain', { body: { type: 'test' } });
    await s.request('POST', 'plain/data/x', { body: { value: marker } });
    const token = (await s.request('POST', 'auth/token/create', { body: {} })).body.auth.client_token as string;
    await s.request('PUT', 'sys/policies/password/pp', { body: { policy: `length = 20\nrule "charset" { charset = "abc${marker.slice(-4)}" }` } });
    await new Promise((r) => setTimeout(r, 50));
    const files = readdirSync(s.dataDir).filter((f) => f.startsWith('strongroom.db'));
    const bytes = Buffer.concat(files.map((f) => readFileSync(join(s.dataDir, f))));
    expect(bytes.includes(marker)).toBe(false);
    expect(bytes.includes(token)).toBe(false);
    expect(bytes.includes(token.slice(4))).toBe(false);
    expect(bytes.includes('still here')).toBe(false);
  });
});

describe('SQLite files at rest', () => {
  const modes = (dir: string) => Object.fromEntries([['.', dir], ...readdirSync(dir).map((f) => [f, join(dir, f)])].map(([name, path]) => [name, statSync(path).mode & 0o7777]));

  it('"the data directory is 0700 and every file in it 0600, on a fresh start and again after someone loosened them"', async () => {
    const dir = join(freshDir(), 'data');
    // No unseal key given: the server generates unseal.key beside the database.
    const settings = { STRONGROOM_STORAGE: `sqlite:${join(dir, 'strongroom.db')}`, STRONGROOM_UNSEAL_KEY: '' };
    const first = await startTestServer({ storage: 'sqlite', dataDir: dir, backends, env: settings });
    open.push(first);
    await first.request('POST', 'sys/mounts/kept', { body: { type: 'test' } });
    const tight = {
      '.': 0o700, 'strongroom.db': 0o600, 'strongroom.db-wal': 0o600, 'strongroom.db-shm': 0o600, 'unseal.key': 0o600,
      'strongroom.db-lock': 0o600, 'strongroom.db-lock.pid': 0o600,
    };
    expect(modes(dir)).toEqual(tight);
    for (const f of readdirSync(dir)) chmodSync(join(dir, f), 0o644);
    chmodSync(dir, 0o755);
    await first.close();
    open.pop();

    const second = await startTestServer({ storage: 'sqlite', dataDir: dir, backends, env: settings });
    open.push(second);
    expect((await second.request('GET', 'sys/mounts')).body.data['kept/'].type).toBe('test');
    expect(modes(dir)).toEqual(tight);
  });
});

describe('sys/key-status and sys/rotate', () => {
  it('"key-status shows the active term, when it was installed and its encryptions; a restart resumes the count from its reservation; sys/rotate starts a new term"', async () => {
    const key = randomBytes(32).toString('base64');
    const first = await server(freshDir(), key);
    const before = (await first.request('GET', 'sys/key-status')).body.data;
    expect(before).toEqual({ term: 1, install_time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/), encryptions: expect.any(Number) });
    await first.request('POST', 'sys/mounts/kept', { body: { type: 'test' } });
    for (let i = 0; i < 5; i++) await first.request('POST', `kept/data/${i}`, { body: { value: `v${i}` } });
    const written = (await first.request('GET', 'sys/key-status')).body.data.encryptions;
    expect(written).toBeGreaterThanOrEqual(before.encryptions + 5);
    await first.close();
    open.pop();

    const second = await server(first.dataDir, key);
    // The keyring reserves seals a block (2^20) at a time: the restart counts the whole block as used.
    expect((await second.request('GET', 'sys/key-status')).body.data).toMatchObject({ term: 1, install_time: before.install_time, encryptions: 2 ** 20 });
    expect((await second.request('POST', 'sys/rotate')).status).toBe(204);
    expect((await second.request('GET', 'sys/key-status')).body.data).toMatchObject({ term: 2, encryptions: 0 });
    expect((await second.request('GET', 'kept/data/4')).body.data.value).toBe('v4');
  });
});
