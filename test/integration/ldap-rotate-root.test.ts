import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { readConfig } from '../../src/engines/ldap/config-store.ts';
import { readWal, writeWal } from '../../src/engines/ldap/rotation.ts';
import { canBind, createIsolatedOu, resetPassword, type IsolatedOu } from '../support/slapd.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { configure, cred, ok, ouConfig, mountStorage } from '../support/ldap-engine.ts';
import { FaultyStorage } from '../support/faulty-storage.ts';

const facts = inject('slapd');

let ou: IsolatedOu;
const pool = testServers();
const server = pool.start;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 0 });
});
afterEach(async () => {
  await pool.closeAll();
  await ou.cleanup();
});

const storedConfig = async (s: TestServer) => (await readConfig(mountStorage(s)))!;

/** Proves the engine can still work on the directory: a static role rotates and its password binds. */
async function engineWorks(s: TestServer, name: string, userIndex: number): Promise<void> {
  await ok(s, 'POST', `ldap/static-role/${name}`, { username: ou.users[userIndex]!.name, rotation_period: '1h' });
  expect(await canBind(facts.url, ou.users[userIndex]!.dn, (await cred(s, name)).password)).toBe(true);
}

describe('rotate-root', () => {
  it('the old bind password stops working, the engine keeps working, nobody sees the new one', async () => {
    const s = await server();
    await configure(s, facts, ou);
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(204);
    expect(r.body).toBeUndefined();
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    const config = await storedConfig(s);
    expect(config.bindpass).toMatch(/^[A-Za-z0-9]{64}$/);
    expect(await canBind(facts.url, ou.engine.dn, config.bindpass)).toBe(true);
    const read = (await s.request('GET', 'ldap/config')).body;
    expect(JSON.stringify(read)).not.toContain(config.bindpass);
    expect(JSON.stringify(read)).not.toContain(ou.engine.password);
    expect(Date.parse(read.data.last_bind_password_rotation)).toBeGreaterThan(Date.now() - 60_000);
    await engineWorks(s, 'after', 0);
    // Twice in a row works too (the second binds with the first's password).
    await ok(s, 'POST', 'ldap/rotate-root');
    expect(await canBind(facts.url, ou.engine.dn, config.bindpass)).toBe(false);
    await engineWorks(s, 'after2', 1);
  });

  it('uses the password policy (or length) of the config', async () => {
    const s = await server();
    await configure(s, facts, ou, { length: 20 });
    await ok(s, 'POST', 'ldap/rotate-root');
    expect((await storedConfig(s)).bindpass).toMatch(/^[A-Za-z0-9]{20}$/);
    await ok(s, 'POST', 'ldap/config', { length: 0, password_policy: 'nope' });
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('password policy "nope" does not exist');
  });

  it('without a config is a 400', async () => {
    const s = await server();
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('missing LDAP configuration');
  });

  it('a directory failure is a 502 and changes nothing', async () => {
    const s = await server();
    await configure(s, facts, ou, { bindpass: 'wrong-password' });
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(502);
    expect(JSON.stringify(r.body)).not.toContain('wrong-password');
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(true);
    expect((await storedConfig(s)).bindpass).toBe('wrong-password');
  });

  it('keeps the previous password as a bind fallback for the grace period, and erases it only after a bind with the recorded one is verified (repaired first when the directory went back)', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/rotate-root');
    const config = await storedConfig(s);
    expect(config.last_bind_password).toBe(ou.engine.password);
    // Simulate a replica that still has the previous password: the server must fall back to it.
    const { Client } = await import('ldapts');
    const root = new Client({ url: facts.url });
    await root.bind(facts.rootDn, facts.rootPassword);
    const { Attribute, Change } = await import('ldapts');
    const revert = () => root.modify(ou.engine.dn, new Change({ operation: 'replace', modification: new Attribute({ type: 'userPassword', values: [ou.engine.password] }) }));
    try {
      await revert();
      await engineWorks(s, 'during-grace', 0);
      await clock.advance(10 * 60_000 + 1000);
      // The directory refused bindpass at the grace end: it was written again (through the fallback), then verified.
      await vi.waitFor(async () => expect((await storedConfig(s)).last_bind_password).toBe(''), { timeout: 15_000 });
      expect(await canBind(facts.url, ou.engine.dn, config.bindpass)).toBe(true);
      expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
      await engineWorks(s, 'after-grace', 1);
    } finally {
      await root.unbind();
    }
  });

  it('an unrelated config update keeps the grace period; a new bindpass from the operator ends it', async () => {
    const s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/rotate-root');
    await ok(s, 'POST', 'ldap/config', { url: facts.url });
    expect((await storedConfig(s)).last_bind_password).toBe(ou.engine.password);
    await ok(s, 'POST', 'ldap/config', { bindpass: 'set-by-the-operator' });
    expect((await storedConfig(s)).last_bind_password).toBe('');
  });
});

describe('rotate-root write-ahead', () => {
  it('storage fails after the directory change: the engine still binds (WAL password) and the retry finishes', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    const s = await server({ storageInstance: storage });
    await configure(s, facts, ou);
    storage.failNext((op) => op.type === 'delete' && op.key.endsWith('/wal/root'));
    const r = await s.request('POST', 'ldap/rotate-root');
    expect(r.status).toBe(500);
    const wal = (await readWal(mountStorage(s), 'root'))!;
    expect(await canBind(facts.url, ou.engine.dn, wal.new_password)).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    // The stored bindpass is stale, yet the engine works: it falls back to the WAL password.
    expect((await storedConfig(s)).bindpass).toBe(ou.engine.password);
    await engineWorks(s, 'meanwhile', 0);
    // The retry finishes with the same password.
    await ok(s, 'POST', 'ldap/rotate-root');
    expect((await storedConfig(s)).bindpass).toBe(wal.new_password);
    expect(await readWal(mountStorage(s), 'root')).toBeUndefined();
    await engineWorks(s, 'after', 1);
  });

  it('a crash mid rotate-root is finished at start-up with the WAL password', async () => {
    const dataDir = pool.dataDir('strongroom-ldap-');
    const unsealKey = randomBytes(32).toString('base64');
    const s1 = await server({ storage: 'sqlite', dataDir, unsealKey });
    await configure(s1, facts, ou);
    await writeWal(mountStorage(s1), { id: 'crash', target: 'root', new_password: 'Root-Wal-Password-42', password_source: 'length:64', dn: '', created: Date.now() });
    await s1.close();

    const s2 = await server({ storage: 'sqlite', dataDir, unsealKey });
    await vi.waitFor(async () => expect((await storedConfig(s2)).bindpass).toBe('Root-Wal-Password-42'), { timeout: 5000 });
    expect(await canBind(facts.url, ou.engine.dn, 'Root-Wal-Password-42')).toBe(true);
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    await engineWorks(s2, 'after', 0);
  });
});

/**
 * A rotate-root whose directory change landed but whose record did not (the audit's reproduction of finding 7):
 * the WAL now holds the only copy of the password the directory has for the bind account.
 */
async function unfinishedRotateRoot(s: TestServer, storage: FaultyStorage): Promise<string> {
  storage.failNext((op) => op.type === 'put' && op.key.endsWith('/config'));
  expect((await s.request('POST', 'ldap/rotate-root')).status).toBe(500);
  const wal = (await readWal(mountStorage(s), 'root'))!;
  expect(await canBind(facts.url, ou.engine.dn, wal.new_password)).toBe(true);
  expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
  return wal.new_password;
}

/** The password is still producible: the WAL holds it, the engine binds with it, and rotate-root records it. */
async function walFinishes(s: TestServer, password: string): Promise<void> {
  expect((await readWal(mountStorage(s), 'root'))?.new_password).toBe(password);
  await ok(s, 'POST', 'ldap/rotate-root');
  expect((await storedConfig(s)).bindpass).toBe(password);
  expect(await canBind(facts.url, ou.engine.dn, password)).toBe(true);
}

describe('POST ldap/config during an unfinished rotate-root', () => {
  let s: TestServer;
  let storage: FaultyStorage;
  beforeEach(async () => {
    storage = new FaultyStorage(new MemoryStorage());
    s = await server({ storageInstance: storage });
    await configure(s, facts, ou);
  });

  it.each<[string, () => Record<string, unknown>]>([
    ['binddn repeated (the audit\'s reproduction)', () => ({ binddn: ou.engine.dn, url: facts.url })],
    ['the whole config re-posted, the original bindpass included (IaC)', () => ouConfig(facts, ou)],
    ['binddn in another spelling of the same DN', () => ({ binddn: ou.engine.dn.toUpperCase().replace(/,/g, ', ') })],
    ['another field only', () => ({ request_timeout: 7 })],
  ])('"only a bindpass the operator replaces drops the WAL": %s keeps it, the engine still binds', async (_write, body) => {
    const password = await unfinishedRotateRoot(s, storage);
    await ok(s, 'POST', 'ldap/config', body());
    await engineWorks(s, 'after-write', 0);
    await walFinishes(s, password);
  });

  it('"a bindpass the operator supplies supersedes the WAL (they know the directory\'s password)"', async () => {
    await unfinishedRotateRoot(s, storage);
    await resetPassword(facts, ou.engine.dn, 'reset-by-the-operator');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'reset-by-the-operator' });
    expect(await readWal(mountStorage(s), 'root')).toBeUndefined();
    await engineWorks(s, 'after-reset', 0);
  });

  it('"another bind account is refused until rotate-root finished, unless its bindpass comes with it"', async () => {
    const password = await unfinishedRotateRoot(s, storage);
    for (const [field, body] of [['binddn', { binddn: facts.engineDn }], ['upndomain', { upndomain: 'example.org' }]] as const) {
      const r = await s.request('POST', 'ldap/config', { body });
      expect(r.status, JSON.stringify(r.body)).toBe(400);
      expect(r.body.errors[0]).toMatch(new RegExp(`^${field}: a rotate-root of the current bind account is unfinished.*ldap/rotate-root`));
      expect(JSON.stringify(r.body)).not.toContain(password);
    }
    expect((await storedConfig(s)).binddn).toBe(ou.engine.dn);
    expect((await readWal(mountStorage(s), 'root'))?.new_password).toBe(password);
    // Switching accounts with the new one's password is the operator supplying a known password.
    await ok(s, 'POST', 'ldap/config', { binddn: facts.engineDn, bindpass: facts.enginePassword });
    expect(await readWal(mountStorage(s), 'root')).toBeUndefined();
    await engineWorks(s, 'other-account', 0);
  });
});

describe('DELETE ldap/config during an unfinished rotate-root', () => {
  it('"refused while the WAL may hold the bind account\'s only password; allowed once rotate-root finished"', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    const s = await server({ storageInstance: storage });
    await configure(s, facts, ou);
    const password = await unfinishedRotateRoot(s, storage);
    const r = await s.request('DELETE', 'ldap/config');
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toMatch(/^cannot delete the configuration while a rotate-root is unfinished.*ldap\/rotate-root/);
    expect((await s.request('GET', 'ldap/config')).status).toBe(200);
    await walFinishes(s, password);
    expect((await s.request('DELETE', 'ldap/config')).status).toBe(204);
  });
});

describe('POST ldap/config with other password changes pending', () => {
  it('"config writes never touch a static role\'s or a library check-in\'s WAL": both finish with their password', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    const s = await server({ storageInstance: storage });
    await configure(s, facts, ou);
    const view = mountStorage(s);
    await ok(s, 'POST', 'ldap/static-role/app', { username: ou.users[0]!.name, rotation_period: '1h' });
    // Each commit fails after the directory took the password: the one that records it and removes its WAL.
    storage.failNext((op) => op.type === 'delete' && op.key.endsWith('/wal/static-role/app'));
    expect((await s.request('POST', 'ldap/rotate-role/app')).status).toBe(500);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: [ou.users[1]!.name] });
    await ok(s, 'POST', 'ldap/library/team/check-out');
    storage.failNext((op) => op.type === 'delete' && op.key.endsWith(`/wal/library/${ou.users[1]!.name}`));
    expect((await s.request('POST', 'ldap/library/team/check-in')).status).toBe(500);
    const [roleWal, loanWal] = [(await readWal(view, 'static-role/app'))!, (await readWal(view, `library/${ou.users[1]!.name}`))!];

    await ok(s, 'POST', 'ldap/config', { binddn: ou.engine.dn });
    await resetPassword(facts, ou.engine.dn, 'reset-by-the-operator');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'reset-by-the-operator' });
    expect((await readWal(view, 'static-role/app'))?.new_password).toBe(roleWal.new_password);
    expect((await readWal(view, `library/${ou.users[1]!.name}`))?.new_password).toBe(loanWal.new_password);

    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect((await cred(s, 'app')).password).toBe(roleWal.new_password);
    expect(await canBind(facts.url, ou.users[0]!.dn, roleWal.new_password)).toBe(true);
    await ok(s, 'POST', 'ldap/library/manage/team/check-in');
    expect(await canBind(facts.url, ou.users[1]!.dn, loanWal.new_password)).toBe(true);
  });
});
