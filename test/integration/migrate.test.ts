// npm run migrate: a store copied as stored, from SQLite to PostgreSQL (and back), then served with the same unseal key.
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { backendTypes } from '../../src/engines.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';
import { createDatabase, type TestDatabase } from '../support/postgres.ts';
import { startTestServer } from '../support/server.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const slapd = inject('slapd');
const postgres = inject('postgres');
const backends = { secret: { ...backendTypes.secret, test: testBackend(new Map<string, TestBackendProbe>()) }, auth: backendTypes.auth };

let dir: string;
let db: TestDatabase;
let ou: IsolatedOu;
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'strongroom-migrate-'));
  db = await createDatabase(postgres);
  ou = await createIsolatedOu(slapd, { users: 1, serviceAccounts: 1 });
});
afterEach(async () => {
  await db.drop();
  await ou.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

interface Run { code: number; stdout: string; stderr: string }

/** The README's command, as an operator types it. */
async function migrate(...args: string[]): Promise<Run> {
  const run = promisify(execFile)('npm', ['run', '--silent', 'migrate', '--', ...args], { env: { ...process.env, npm_config_loglevel: 'error' } });
  return run.then(({ stdout, stderr }) => ({ code: 0, stdout, stderr }), (e: Run) => ({ code: e.code, stdout: e.stdout, stderr: e.stderr }));
}

const sqlite = (name: string) => `sqlite:${join(dir, name, 'strongroom.db')}`;
/** The shared test server takes any password (trust on loopback): this one is only there to be masked. */
const withPassword = (url: string, password: string) => url.replace('://strongroom@', `://strongroom:${password}@`);

describe('npm run migrate', () => {
  it('"copies a SQLite store to PostgreSQL as stored: a server on PostgreSQL with the same unseal key serves the same policy, objects, token, leases, static role and library loan"', async () => {
    const key = randomBytes(32).toString('base64');
    const source = await startTestServer({ storage: 'sqlite', dataDir: join(dir, 'source'), unsealKey: key, backends });
    await source.request('PUT', 'sys/policies/acl/reader', { body: { policy: 'path "kv/*" { capabilities = ["read", "list"] }' } });
    await source.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
    await source.request('POST', 'kv/data/a', { body: { value: 'moved' } });
    const token = (await source.request('POST', 'auth/token/create', { body: { policies: ['reader'] } })).body.auth.client_token;
    const lease = (await source.request('GET', 'kv/creds/c')).body.lease_id;
    await configure(source, slapd, ou);
    await ok(source, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '24h' });
    const staticCred = await cred(source, 'app');
    await ok(source, 'POST', 'ldap/library/team', { service_account_names: ['svc0'], ttl: '1h' });
    const loan = (await source.request('POST', 'ldap/library/team/check-out', { body: {} })).body;
    const loans = (await source.request('GET', 'ldap/library/team/status')).body.data;
    expect(loans.svc0.available).toBe(false);
    await source.close();

    const password = `pw-${randomBytes(6).toString('hex')}`;
    const copied = await migrate('--from', sqlite('source'), '--to', withPassword(db.url, password));
    expect(copied.code, copied.stderr).toBe(0);
    expect(copied.stdout).toMatch(/^Copied (\d+) entries from sqlite:.* to postgres:\/\/strongroom:\*\*\*@127\.0\.0\.1:\d+\/\w+\.\nVerified: both hold \1 entries, SHA-256 [0-9a-f]{64}\./);
    expect(copied.stdout).toMatch(/STRONGROOM_STORAGE=postgres:\/\/strongroom:\*\*\*@.* and the same unseal key/s);
    expect(copied.stdout + copied.stderr).not.toContain(password);

    const target = await startTestServer({ postgresUrl: db.url, unsealKey: key, backends });
    try {
      expect((await target.request('GET', 'kv/data/a', { token })).body.data.value).toBe('moved');
      expect((await target.request('GET', 'sys/policies/acl/reader')).body.data.policy).toContain('kv/*');
      expect((await target.request('PUT', 'sys/leases/lookup', { body: { lease_id: lease } })).body.data.id).toBe(lease);
      expect(await cred(target, 'app')).toMatchObject({ username: 'user0', password: staticCred.password, last_service_rotation: staticCred.last_service_rotation });
      expect((await target.request('GET', 'ldap/library/team/status')).body.data).toEqual(loans);
      expect(await canBind(slapd.url, ou.serviceAccounts[0].dn, loan.data.password)).toBe(true);
      expect((await target.request('POST', 'ldap/library/team/check-in', { body: {} })).body.data).toEqual({ check_ins: ['svc0'] });
    } finally {
      await target.close();
    }

    const again = await migrate('--from', sqlite('source'), '--to', db.url);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^strongroom migrate: the destination postgres:.* is not empty: migrate only into a new store\.\n$/);
  });

  it('"migrating back from PostgreSQL into a new SQLite file copies the same entries: the same count and checksum"', async () => {
    const key = randomBytes(32).toString('base64');
    const source = await startTestServer({ storage: 'sqlite', dataDir: join(dir, 'source'), unsealKey: key, backends });
    await source.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
    await source.request('POST', 'kv/data/a', { body: { value: 'round trip' } });
    await source.close();
    const verified = (run: Run) => /Verified: both hold (\d+ entries, SHA-256 [0-9a-f]{64})/.exec(run.stdout)?.[1];
    const there = await migrate('--from', sqlite('source'), '--to', db.url);
    const back = await migrate('--from', db.url, '--to', sqlite('back'));
    expect([there.code, back.code], back.stderr).toEqual([0, 0]);
    expect(verified(back)).toBe(verified(there));
    const served = await startTestServer({ storage: 'sqlite', dataDir: join(dir, 'back'), unsealKey: key, backends });
    expect((await served.request('GET', 'kv/data/a')).body.data.value).toBe('round trip');
    await served.close();
  });

  it('"a SQLite source in use by a server is refused before anything is copied, naming the server\'s pid"', async () => {
    const source = await startTestServer({ storage: 'sqlite', dataDir: join(dir, 'source'), backends });
    try {
      await source.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
      const result = await migrate('--from', sqlite('source'), '--to', db.url);
      expect(result.code).toBe(1);
      expect(result.stderr).toMatch(new RegExp(`the store .*strongroom\\.db is in use by another Strongroom process \\(pid ${process.pid}\\)`));
      expect(result.stderr).not.toMatch(/may now hold part of the data/);
    } finally {
      await source.close();
    }
  });

  it('"a PostgreSQL source written to during the copy fails the check: exit 1, naming the destination as holding part of the data"', async () => {
    const source = await startTestServer({ postgresUrl: db.url, backends });
    await source.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
    let done = false;
    const run = migrate('--from', db.url, '--to', sqlite('copy')).finally(() => (done = true));
    for (let i = 0; i < 5000 && !done; i++) await source.request('POST', `kv/data/busy-${i}`, { body: { value: 'x' } });
    const result = await run;
    await source.close();
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/the source changed during the copy \(\d+ entries then, \d+ now\): stop every server using it\. The destination sqlite:.* may now hold part of the data/);
  });

  it.each([
    ['no --to', ['--from', 'sqlite:/nowhere/strongroom.db'], /both --from and --to are required/],
    ['a source file that does not exist', ['--from', 'sqlite:/nowhere/strongroom.db', '--to', 'sqlite:/tmp/x.db'], /there is no SQLite store at \/nowhere\/strongroom\.db/],
    ['memory', ['--from', 'memory', '--to', 'sqlite:/tmp/x.db'], /"memory" is not a store to migrate/],
  ])('"bad arguments exit 2 with the usage line" (%s)', async (_name, args, message) => {
    const run = await migrate(...args);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).toMatch(/usage: npm run migrate -- --from/);
  });
});
