import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, inject, it, onTestFinished, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { storagePrefix } from '../../src/core/mounts.ts';
import { StorageView } from '../../src/core/storage/view.ts';
import { issueToken } from '../../src/core/token-issue.ts';
import { CHECKOUT_SECRET_TYPE } from '../../src/engines/ldap/library-checkout.ts';
import { readAccount } from '../../src/engines/ldap/library-store.ts';
import { canBind, createIsolatedOu, resetPassword, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer, type TestServerOptions } from '../support/server.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { freePort } from '../support/ports.ts';
import { FaultyStorage } from '../support/faulty-storage.ts';

const facts = inject('slapd');

let s: TestServer;
let ou: IsolatedOu;
let clock: FakeClock;

async function start(opts: TestServerOptions = {}): Promise<void> {
  clock = new FakeClock(Date.now());
  s = await startTestServer({ clock, ...opts });
}

beforeEach(async () => {
  ou = await createIsolatedOu(facts, { serviceAccounts: 8 });
});
afterEach(async () => {
  await s?.close();
  await ou.cleanup();
});

const dnOf = (name: string) => ou.serviceAccounts.find((a) => a.name === name)!.dn;
/** The mount's storage as the engine sees it (through the barrier). */
const mountStorage = () => new StorageView(s.core.barrier, storagePrefix(s.core.mounts.get('ldap/')!));
const binds = (name: string, password: string) => canBind(facts.url, dnOf(name), password);

async function setUp(sets: Record<string, Record<string, unknown>> = { team: { service_account_names: ['svc0', 'svc1'] } }, opts: TestServerOptions = {}): Promise<void> {
  await start(opts);
  await configure(s, facts, ou);
  for (const [name, body] of Object.entries(sets)) await ok(s, 'POST', `ldap/library/${name}`, body);
}

/** `setUp` on SQLite in a directory of this test; `restart()` closes the server and opens the same store again. */
async function setUpOnSqlite(sets?: Record<string, Record<string, unknown>>): Promise<{ restart(): Promise<void> }> {
  const unsealKey = randomBytes(32).toString('base64');
  const dataDir = mkdtempSync(join(tmpdir(), 'strongroom-library-'));
  onTestFinished(() => rmSync(dataDir, { recursive: true, force: true }));
  await setUp(sets, { storage: 'sqlite', dataDir, unsealKey });
  return {
    async restart() {
      await s.close();
      s = await startTestServer({ clock, storage: 'sqlite', dataDir, unsealKey });
    },
  };
}

async function checkOut(set: string, token = 'root', body: Record<string, unknown> = {}) {
  return s.request('POST', `ldap/library/${set}/check-out`, { token, body });
}

async function checkedOut(set: string, token = 'root', body: Record<string, unknown> = {}): Promise<{ name: string; password: string; leaseId: string; duration: number }> {
  const r = await checkOut(set, token, body);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return { name: r.body.data.service_account_name, password: r.body.data.password, leaseId: r.body.lease_id, duration: r.body.lease_duration };
}

async function checkIn(set: string, token = 'root', names?: string[], manage = false) {
  const path = manage ? `ldap/library/manage/${set}/check-in` : `ldap/library/${set}/check-in`;
  return s.request('POST', path, { token, body: names ? { service_account_names: names } : {} });
}

async function status(set: string): Promise<Record<string, any>> {
  const r = await s.request('GET', `ldap/library/${set}/status`);
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data;
}

async function policy(rules: string): Promise<string> {
  const name = `p${randomBytes(4).toString('hex')}`;
  expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: rules } })).status).toBe(204);
  return name;
}

const BORROWER_RULES = `
path "ldap/library/*" { capabilities = ["read", "create", "update"] }
path "ldap/library/manage/*" { capabilities = ["deny"] }
`;

/** A token of its own (no entity) with the borrower policy. */
async function borrowerToken(): Promise<{ token: string; accessor: string }> {
  const p = await policy(BORROWER_RULES);
  const r = await s.request('POST', 'auth/token/create', { body: { policies: [p], no_parent: true } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return { token: r.body.auth.client_token, accessor: r.body.auth.accessor };
}

/** Two tokens of one entity, as two logins of the same workload would get. */
async function entityTokens(): Promise<{ entityId: string; tokens: string[] }> {
  const p = await policy(BORROWER_RULES);
  const entity = await s.core.identity.upsertAlias('test-auth-accessor', `workload-${randomBytes(4).toString('hex')}`, {}, []);
  const tokens: string[] = [];
  for (let i = 0; i < 2; i++) {
    const issued = await issueToken(s.core, { policies: ['default', p], path: 'auth/test/login', displayName: 'test-workload', ttl: 3600, parent: '', renewable: true, entityId: entity.id });
    tokens.push(issued.token);
  }
  return { entityId: entity.id, tokens };
}

describe('ldap/library/:set_name', () => {
  it('"create, read (TTLs as integer seconds), update only the sent keys, delete"', async () => {
    await setUp({});
    await ok(s, 'POST', 'ldap/library/Team', { service_account_names: 'svc0, svc1', ttl: '1h', max_ttl: '2h' });
    const r = await s.request('GET', 'ldap/library/team');
    const defaults = { max_wait: 60, max_checkouts_per_entity: 0 };
    expect(r.body.data).toEqual({ service_account_names: ['svc0', 'svc1'], ttl: 3600, max_ttl: 7200, disable_check_in_enforcement: false, ...defaults });
    await ok(s, 'POST', 'ldap/library/team', { disable_check_in_enforcement: true });
    expect((await s.request('GET', 'ldap/library/team')).body.data).toEqual({ service_account_names: ['svc0', 'svc1'], ttl: 3600, max_ttl: 7200, disable_check_in_enforcement: true, ...defaults });
    await ok(s, 'DELETE', 'ldap/library/team');
    expect((await s.request('GET', 'ldap/library/team')).status).toBe(404);
  });

  it('"ttl and max_ttl default to 24h"', async () => {
    await setUp({ team: { service_account_names: ['svc0'] } });
    expect((await s.request('GET', 'ldap/library/team')).body.data).toMatchObject({ ttl: 86400, max_ttl: 86400 });
  });

  it('"creating a set sets each member\'s password: the directory\'s old one stops working"', async () => {
    await setUp();
    expect(await binds('svc0', ou.serviceAccounts[0]!.password)).toBe(false);
    expect(await binds('svc2', ou.serviceAccounts[2]!.password)).toBe(true);
  });

  it('"LIST shows direct children; prefixes end with /"', async () => {
    await setUp({ foo: { service_account_names: ['svc0'] }, 'org/platform/dev': { service_account_names: ['svc1'] }, 'org/secure': { service_account_names: ['svc2'] } });
    expect((await s.request('LIST', 'ldap/library')).body.data.keys).toEqual(['foo', 'org/']);
    expect((await s.request('LIST', 'ldap/library/org/')).body.data.keys).toEqual(['platform/', 'secure']);
    expect((await s.request('GET', 'ldap/library/org/platform/dev/status')).status).toBe(200);
  });

  it.each([
    [{}, 'missing required field "service_account_names"'],
    [{ service_account_names: '' }, 'at least one service account is required'],
    [{ service_account_names: ['svc0', 'SVC0'] }, 'element 2 repeats an earlier one'],
    [{ service_account_names: 'svc0', ttl: '2h', max_ttl: '1h' }, 'invalid value for field "max_ttl": 3600s is shorter than ttl (7200s)'],
    [{ service_account_names: 'svc0', ttl: 'soon' }, 'invalid value for field "ttl"'],
    [{ service_account_names: ['svc0', 'nobody'] }, 'element 2 was not found in the directory'],
  ])('"bad input is a 400 naming the field": %j', async (body, message) => {
    await setUp({});
    const r = await s.request('POST', 'ldap/library/bad', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(message);
    expect((await s.request('GET', 'ldap/library/bad')).status).toBe(404);
    // Nothing half-done: svc0 was not claimed and its password not changed.
    expect(await binds('svc0', ou.serviceAccounts[0]!.password)).toBe(true);
    await ok(s, 'POST', 'ldap/library/good', { service_account_names: ['svc0'] });
  });

  it('"an account belongs to one set only and to no static role"', async () => {
    await setUp();
    const r = await s.request('POST', 'ldap/library/other', { body: { service_account_names: ['svc2', 'SVC1'] } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('"SVC1" is already managed by the secrets engine (library set "team")');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'svc3', rotation_period: '1h' });
    const clash = await s.request('POST', 'ldap/library/other', { body: { service_account_names: ['svc3'] } });
    expect(clash.status).toBe(400);
    expect(clash.body.errors[0]).toContain('static role "app"');
    const roleClash = await s.request('POST', 'ldap/static-role/app2', { body: { username: 'svc0', rotation_period: '1h' } });
    expect(roleClash.status).toBe(400);
    // After deleting the set its accounts are free again.
    await ok(s, 'DELETE', 'ldap/library/team');
    await ok(s, 'POST', 'ldap/library/other', { service_account_names: ['svc0', 'svc1'] });
  });

  it('"removing a checked-out account from its set, or deleting the set, is refused until it is checked in"', async () => {
    await setUp();
    const lent = await checkedOut('team');
    expect(lent.name).toBe('svc0');
    const update = await s.request('POST', 'ldap/library/team', { body: { service_account_names: ['svc1'] } });
    expect(update.status).toBe(400);
    expect(update.body.errors[0]).toContain('"svc0" is checked out');
    const del = await s.request('DELETE', 'ldap/library/team');
    expect(del.status).toBe(400);
    expect((await s.request('GET', 'ldap/library/team')).body.data.service_account_names).toEqual(['svc0', 'svc1']);
    expect(await binds('svc0', lent.password)).toBe(true);

    // Removing an available member is fine and frees it for another owner.
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc0', 'svc2'] });
    await ok(s, 'POST', 'ldap/library/other', { service_account_names: ['svc1'] });
    expect(Object.keys(await status('team'))).toEqual(['svc0', 'svc2', 'waiters']);

    expect((await checkIn('team', 'root', ['svc0'], true)).status).toBe(200);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc2'] });
    await ok(s, 'DELETE', 'ldap/library/team');
  });

  it('"members are one account whatever their case: a case-only rename (svc1 → SVC1) keeps it lendable with its password, registered once"', async () => {
    await setUp();
    const before = (await readAccount(mountStorage(), 'svc1'))!.state.password;
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc0', 'SVC1'] });
    expect(await status('team')).toEqual({ svc0: { available: true }, SVC1: { available: true }, waiters: 0 });
    await checkedOut('team');
    const renamed = await checkedOut('team');
    expect(renamed.name).toBe('SVC1');
    expect(renamed.password).toBe(before);
    expect(await binds('svc1', renamed.password)).toBe(true);
    // One record, one claim: the account is still the set's, under any spelling.
    expect(await mountStorage().list('library-account/')).toEqual(['svc0', 'svc1']);
    const clash = await s.request('POST', 'ldap/static-role/app', { body: { username: 'Svc1', rotation_period: '1h' } });
    expect(clash.body.errors[0]).toContain('(library set "team")');
    expect((await checkIn('team', 'root', ['svc1'])).body.data).toEqual({ check_ins: ['SVC1'] });
    expect(await binds('svc1', renamed.password)).toBe(false);
  });

  it('"after a case-only rename, deleting the set frees the account for another set and for a static role"', async () => {
    await setUp({ team: { service_account_names: ['svc1'] } });
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['SVC1'] });
    await ok(s, 'DELETE', 'ldap/library/team');
    expect(await mountStorage().list('library-account/')).toEqual([]);
    await ok(s, 'POST', 'ldap/library/other', { service_account_names: ['svc1'] });
    await ok(s, 'DELETE', 'ldap/library/other');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'svc1', rotation_period: '1h' });
  });

  it('"the config cannot be deleted while sets use it"', async () => {
    await setUp();
    const r = await s.request('DELETE', 'ldap/config');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('library sets (team)');
  });
});

describe('ldap/library/:set_name/status', () => {
  it('"maps each account to {available}, plus the borrower, lease and times of a checked-out one, and counts waiters"', async () => {
    await setUp();
    expect(await status('team')).toEqual({ svc0: { available: true }, svc1: { available: true }, waiters: 0 });
    const b = await borrowerToken();
    const lent = await checkedOut('team', b.token);
    expect(await status('team')).toEqual({
      svc0: {
        available: false, borrower_client_token: b.accessor, borrower_accessor: b.accessor, borrower_entity_id: '', lease_id: lent.leaseId,
        checked_out_at: new Date(clock.now()).toISOString(), expires_at: new Date(clock.now() + lent.duration * 1000).toISOString(),
      },
      svc1: { available: true },
      waiters: 0,
    });
    expect(JSON.stringify(await status('team'))).not.toContain(b.token);
  });

  it('"a missing set is 404"', async () => {
    await setUp({});
    expect((await s.request('GET', 'ldap/library/none/status')).status).toBe(404);
    expect((await checkOut('none')).status).toBe(404);
  });
});

describe('ldap/library/:set_name/check-out', () => {
  it('"available → checked out: password and renewable lease returned; the password works in the directory"', async () => {
    await setUp({ team: { service_account_names: ['svc0', 'svc1'], ttl: '1h', max_ttl: '2h' } });
    const r = await checkOut('team');
    expect(r.status).toBe(200);
    expect(r.body.renewable).toBe(true);
    expect(r.body.lease_duration).toBe(3600);
    expect(r.body.lease_id).toMatch(/^ldap\/library\/team\/check-out\/\w+$/);
    expect(Object.keys(r.body.data).sort()).toEqual(['password', 'service_account_name']);
    expect(await binds(r.body.data.service_account_name, r.body.data.password)).toBe(true);
    expect((await status('team'))[r.body.data.service_account_name].available).toBe(false);
  });

  it('"no free account → 400 with a clear message"', async () => {
    await setUp();
    await checkedOut('team');
    await checkedOut('team');
    const r = await checkOut('team');
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['No service accounts available for check-out.']);
  });

  it('"the account lent is the least recently returned one (never returned counts as longest ago); it holds after a restart"', async () => {
    const store = await setUpOnSqlite({ team: { service_account_names: ['svc0', 'svc1', 'svc2', 'svc3'] } });
    const lent = [(await checkedOut('team')).name, (await checkedOut('team')).name, (await checkedOut('team')).name, (await checkedOut('team')).name];
    expect(lent).toEqual(['svc0', 'svc1', 'svc2', 'svc3']);
    for (const name of ['svc2', 'svc0', 'svc3', 'svc1']) {
      await ok(s, 'POST', 'ldap/library/team/check-in', { service_account_names: [name] });
      await clock.advance(1000);
    }
    expect((await checkedOut('team')).name).toBe('svc2');
    expect((await checkedOut('team')).name).toBe('svc0');
    await ok(s, 'POST', 'ldap/library/team/check-in', { service_account_names: ['svc2'] });
    await ok(s, 'POST', 'ldap/library/team/check-in', { service_account_names: ['svc0'] });
    // svc3 and svc1 were returned before svc2 and svc0 were.
    expect((await checkedOut('team')).name).toBe('svc3');
    await ok(s, 'POST', 'ldap/library/team/check-in', { service_account_names: ['svc3'] });
    await store.restart();
    expect((await checkedOut('team')).name).toBe('svc1');
    const rest = [(await checkedOut('team')).name, (await checkedOut('team')).name, (await checkedOut('team')).name];
    expect(rest.sort()).toEqual(['svc0', 'svc2', 'svc3']);
    expect((await checkOut('team')).status).toBe(400);
  });

  it('"a requested ttl larger than the set\'s is capped at the set\'s; a smaller one is used"', async () => {
    await setUp({ team: { service_account_names: ['svc0', 'svc1', 'svc2'], ttl: '1h', max_ttl: '2h' } });
    expect((await checkedOut('team', 'root', { ttl: '10h' })).duration).toBe(3600);
    expect((await checkedOut('team', 'root', { ttl: '10m' })).duration).toBe(600);
    expect((await checkedOut('team', 'root', { ttl: 0 })).duration).toBe(3600);
  });

  it('"ttl 0 means unlimited where the set allows: as long as max_ttl, or the mount maximum"', async () => {
    await setUp({ capped: { service_account_names: ['svc0'], ttl: 0, max_ttl: '3h' }, open: { service_account_names: ['svc1'], ttl: 0, max_ttl: 0 } });
    expect((await checkedOut('capped')).duration).toBe(3 * 3600);
    expect((await checkedOut('open', 'root', { ttl: 0 })).duration).toBe(768 * 3600);
  });

  it.each(['memory', 'sqlite'] as const)('"64 parallel check-outs on a set of 8 accounts: exactly 8 succeed, the rest 400, no account lent twice; then parallel check-ins" (%s)', async (storage) => {
    const all = ou.serviceAccounts.map((a) => a.name);
    await setUp({ big: { service_account_names: all, disable_check_in_enforcement: true } }, { storage });
    const results = await Promise.all(Array.from({ length: 64 }, () => checkOut('big')));
    const wins = results.filter((r) => r.status === 200);
    expect(wins).toHaveLength(8);
    expect(results.filter((r) => r.status === 400)).toHaveLength(56);
    const names = wins.map((r) => r.body.data.service_account_name as string);
    expect(new Set(names).size).toBe(8);
    for (const r of wins) expect(await binds(r.body.data.service_account_name, r.body.data.password)).toBe(true);

    const ins = await Promise.all(names.map((n) => checkIn('big', 'root', [n])));
    expect(ins.map((r) => r.status)).toEqual(names.map(() => 200));
    expect(ins.flatMap((r) => r.body.data.check_ins).sort()).toEqual([...all].sort());
    for (const r of wins) expect(await binds(r.body.data.service_account_name, r.body.data.password)).toBe(false);
    const { waiters, ...accounts } = await status('big');
    expect(waiters).toBe(0);
    expect(Object.values(accounts).every((v) => v.available)).toBe(true);
    // The leases ended with the check-ins.
    expect((await s.request('LIST', 'sys/leases/lookup/ldap/library/big/check-out/')).status).toBe(404);
  });
});

describe('ldap/library/:set_name/check-in', () => {
  it('"checked out → available by the borrower: listed in check_ins, password rotated, lease ended"', async () => {
    await setUp({ team: { service_account_names: ['svc0'] } });
    const b = await borrowerToken();
    const lent = await checkedOut('team', b.token);
    const r = await checkIn('team', b.token);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ check_ins: [lent.name] });
    expect(await binds(lent.name, lent.password)).toBe(false);
    expect((await status('team'))[lent.name]).toEqual({ available: true });
    expect((await s.request('POST', 'sys/leases/lookup', { body: { lease_id: lent.leaseId } })).status).toBe(400);
    // The next borrower gets the new password, which works.
    const again = await checkedOut('team', b.token);
    expect(again.name).toBe(lent.name);
    expect(again.password).not.toBe(lent.password);
    expect(await binds(again.name, again.password)).toBe(true);
  });

  it('"available → available: an already checked-in account succeeds and is not listed"', async () => {
    await setUp();
    const lent = await checkedOut('team');
    expect((await checkIn('team', 'root', [lent.name])).body.data.check_ins).toEqual([lent.name]);
    const r = await checkIn('team', 'root', [lent.name]);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ check_ins: [] });
    expect((await checkIn('team')).body.data).toEqual({ check_ins: [] });
  });

  it('"only the borrowing token may check in (enforcement by token)"', async () => {
    await setUp();
    const owner = await borrowerToken();
    const other = await borrowerToken();
    const lent = await checkedOut('team', owner.token);
    const r = await checkIn('team', other.token, [lent.name]);
    expect(r.status).toBe(403);
    expect(r.body.errors[0]).toContain(`"${lent.name}" can't be checked in because it wasn't checked out by the caller`);
    // Without names, the other caller holds nothing: nothing is checked in.
    expect((await checkIn('team', other.token)).body.data).toEqual({ check_ins: [] });
    expect(await binds(lent.name, lent.password)).toBe(true);
    expect((await checkIn('team', owner.token)).body.data).toEqual({ check_ins: [lent.name] });
  });

  it('"tokens of the same entity may check in each other\'s accounts (enforcement by entity)"', async () => {
    await setUp();
    const { entityId, tokens } = await entityTokens();
    const lent = await checkedOut('team', tokens[0]);
    expect((await status('team'))[lent.name].borrower_entity_id).toBe(entityId);
    const stranger = await borrowerToken();
    expect((await checkIn('team', stranger.token, [lent.name])).status).toBe(403);
    const r = await checkIn('team', tokens[1]!);
    expect(r.status).toBe(200);
    expect(r.body.data.check_ins).toEqual([lent.name]);
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"disable_check_in_enforcement lets any caller check in"', async () => {
    await setUp({ team: { service_account_names: ['svc0'], disable_check_in_enforcement: true } });
    const owner = await borrowerToken();
    const other = await borrowerToken();
    const lent = await checkedOut('team', owner.token);
    expect((await checkIn('team', other.token)).body.data).toEqual({ check_ins: [lent.name] });
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"service_account_names may be omitted only when the caller holds one account"', async () => {
    await setUp();
    await checkedOut('team');
    await checkedOut('team');
    const r = await checkIn('team');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('"service_account_names" must name the ones to check in');
    expect((await checkIn('team', 'root', ['svc0', 'svc1'])).body.data.check_ins).toEqual(['svc0', 'svc1']);
  });

  it('"check-in verifies the account belongs to the set"', async () => {
    await setUp({ team: { service_account_names: ['svc0'] }, other: { service_account_names: ['svc1'] } });
    const lent = await checkedOut('other');
    const r = await checkIn('team', 'root', ['svc1']);
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('element 1 is not a member of library set "team"');
    expect(await binds(lent.name, lent.password)).toBe(true);
  });
});

describe('ldap/library/manage/:set_name/check-in', () => {
  it('"forces the check-in of another caller\'s account; the ACL decides who may"', async () => {
    await setUp();
    const owner = await borrowerToken();
    const lent = await checkedOut('team', owner.token);
    const other = await borrowerToken();
    expect((await checkIn('team', other.token, [lent.name], true)).status).toBe(403);
    const admin = await policy('path "ldap/library/manage/+/check-in" { capabilities = ["update"] }');
    const adminToken = (await s.request('POST', 'auth/token/create', { body: { policies: [admin], no_parent: true } })).body.auth.client_token;
    const r = await checkIn('team', adminToken, undefined, true);
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ check_ins: [lent.name] });
    expect(await binds(lent.name, lent.password)).toBe(false);
    expect((await s.request('POST', 'sys/leases/lookup', { body: { lease_id: lent.leaseId } })).status).toBe(400);
  });
});

describe('library check-out leases', () => {
  it('"checked out → available when the ttl elapses (automatic check-in)"', async () => {
    await setUp({ team: { service_account_names: ['svc0'], ttl: '60s', max_ttl: '120s' } });
    const lent = await checkedOut('team');
    await clock.advance(59_000);
    expect((await status('team')).svc0.available).toBe(false);
    await clock.advance(2_000);
    await s.core.leases.idle();
    expect((await status('team')).svc0).toEqual({ available: true });
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"renew extends the loan up to the set\'s max_ttl, then the loan ends"', async () => {
    await setUp({ team: { service_account_names: ['svc0'], ttl: '60s', max_ttl: '90s' } });
    const lent = await checkedOut('team');
    await clock.advance(50_000);
    const r = await s.request('POST', 'sys/leases/renew', { body: { lease_id: lent.leaseId, increment: 60 } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.lease_duration).toBe(40);
    await clock.advance(39_000);
    expect((await status('team')).svc0.available).toBe(false);
    expect(await binds(lent.name, lent.password)).toBe(true);
    await clock.advance(2_000);
    await s.core.leases.idle();
    expect((await status('team')).svc0.available).toBe(true);
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"revoking the lease checks the account in; renewing a checked-in loan is refused"', async () => {
    await setUp();
    const lent = await checkedOut('team');
    expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: lent.leaseId } })).status).toBe(204);
    expect((await status('team'))[lent.name]).toEqual({ available: true });
    expect(await binds(lent.name, lent.password)).toBe(false);
    const again = await checkedOut('team');
    const secret = s.core.mountedBackend('ldap/')!.secrets!.find((t) => t.type === CHECKOUT_SECRET_TYPE)!;
    const old = { id: lent.leaseId, issueTime: 0, expireTime: 0, increment: 0, internal: { set_name: 'team', service_account_name: lent.name } };
    await expect(secret.renew!(old)).rejects.toThrow(/already checked in/);
    // A late revoke of the first loan must not check in the second borrower.
    await secret.revoke(old);
    expect((await status('team'))[again.name].available).toBe(false);
    expect(await binds(again.name, again.password)).toBe(true);
  });

  it('"revoking the borrowing token checks its accounts in"', async () => {
    await setUp();
    const b = await borrowerToken();
    const lent = await checkedOut('team', b.token);
    expect((await s.request('POST', 'auth/token/revoke', { body: { token: b.token } })).status).toBe(204);
    expect((await status('team'))[lent.name]).toEqual({ available: true });
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"a restart in the middle of a check-out keeps the state (sqlite)"', async () => {
    const store = await setUpOnSqlite();
    const b = await borrowerToken();
    const lent = await checkedOut('team', b.token);
    await store.restart();
    expect((await status('team'))[lent.name]).toMatchObject({ available: false, borrower_client_token: b.accessor, borrower_entity_id: '' });
    const second = await checkedOut('team');
    expect(second.name).not.toBe(lent.name);
    expect((await checkOut('team')).status).toBe(400);
    expect(await binds(lent.name, lent.password)).toBe(true);
    expect((await checkIn('team', b.token)).body.data).toEqual({ check_ins: [lent.name] });
    expect(await binds(lent.name, lent.password)).toBe(false);
  });

  it('"a check-out stores the loan and its lease in one transaction: when that fails, nothing is lent"', async () => {
    await setUpOnSqlite({ solo: { service_account_names: ['svc1'] } });
    // The write that stores the lease fails (a full disk): the loan must not be stored without it.
    const transaction = s.core.barrier.transaction.bind(s.core.barrier);
    vi.spyOn(s.core.barrier, 'transaction').mockImplementationOnce(async (ops, conditions) => {
      if (ops.some((op) => op.type !== 'append' && op.key.includes('/check-out/'))) throw new Error('disk full');
      return transaction(ops, conditions);
    });
    expect((await checkOut('solo')).status).toBe(500);
    expect((await status('solo')).svc1).toEqual({ available: true });
    expect((await s.request('LIST', 'sys/leases/lookup/ldap/library/solo/check-out/')).status).toBe(404);
    const lent = await checkedOut('solo');
    expect(await binds(lent.name, lent.password)).toBe(true);
  });

  it('"a check-in records the account available and ends its lease in one transaction"', async () => {
    await setUp();
    const lent = await checkedOut('team');
    const committed = vi.spyOn(s.core.barrier, 'transaction');
    expect((await checkIn('team', 'root', [lent.name])).body.data).toEqual({ check_ins: [lent.name] });
    const last = committed.mock.calls.at(-1)![0].flatMap((op) => (op.type === 'append' ? [] : [op.key]));
    expect(last.some((k) => k.endsWith(`library-account/${lent.name}`)) && last.some((k) => k.includes(lent.leaseId.split('/').at(-1)!))).toBe(true);
    expect((await s.request('POST', 'sys/leases/lookup', { body: { lease_id: lent.leaseId } })).status).toBe(400);
  });

  it('"a loan whose lease is gone (deleted without the engine, or from an older store) is taken back at the next start"', async () => {
    const store = await setUpOnSqlite({ team: { service_account_names: ['svc0'] } });
    const kept = await checkedOut('team');
    await ok(s, 'POST', 'ldap/library/solo', { service_account_names: ['svc1'] });
    const orphan = await checkedOut('solo');
    await s.core.leases.forget(orphan.leaseId);
    expect((await status('solo')).svc1.available).toBe(false);
    await clock.advance(1000);
    await store.restart();
    await expect.poll(async () => (await status('solo')).svc1, { timeout: 5000 }).toEqual({ available: true });
    // A loan with its lease is left alone.
    expect((await status('team'))[kept.name].available).toBe(false);
    expect(await binds(kept.name, kept.password)).toBe(true);
    const again = await checkedOut('solo');
    expect(await binds(again.name, again.password)).toBe(true);
  });

  it('"a check-in interrupted by a directory failure is finished by the next check-in, or at start-up"', async () => {
    const store = await setUpOnSqlite();
    const first = await checkedOut('team');
    const second = await checkedOut('team');
    await ok(s, 'POST', 'ldap/config', { url: `ldap://127.0.0.1:${await freePort()}` });

    const failed = await checkIn('team', 'root', [first.name, second.name]);
    expect(failed.status).toBe(502);
    // Claimed for check-in but not done: not lendable, and the borrower's password still works.
    expect((await status('team'))[first.name].available).toBe(false);
    expect((await checkOut('team')).status).toBe(400);
    expect(await binds(first.name, first.password)).toBe(true);

    await ok(s, 'POST', 'ldap/config', { url: facts.url });
    expect((await checkIn('team', 'root', [first.name])).body.data).toEqual({ check_ins: [first.name] });
    expect(await binds(first.name, first.password)).toBe(false);

    // The second one fails again, then a restart with a reachable directory finishes it.
    await ok(s, 'POST', 'ldap/config', { url: `ldap://127.0.0.1:${await freePort()}` });
    expect((await checkIn('team', 'root', [second.name])).status).toBe(502);
    await ok(s, 'POST', 'ldap/config', { url: facts.url });
    await store.restart();
    await expect.poll(async () => (await status('team'))[second.name], { timeout: 5000 }).toEqual({ available: true });
    expect(await binds(second.name, second.password)).toBe(false);
    const next = await checkedOut('team');
    expect(await binds(next.name, next.password)).toBe(true);
  });
});

describe('library accounts stored by an earlier version', () => {
  it('"records and WALs keyed by a mixed-case name move to the lower-cased name at start-up: an interrupted check-in finishes with the WAL password"', async () => {
    const store = await setUpOnSqlite({ team: { service_account_names: ['SVC1', 'svc2'] } });
    const loan = await checkedOut('team');
    expect(loan.name).toBe('SVC1');
    // What an earlier version left when the directory took a check-in's password and the commit did not land:
    // the claimed record and the WAL under the name as the set spells it.
    const view = mountStorage();
    const lent = JSON.parse((await view.get('library-account/svc1'))!.toString('utf8'));
    await view.transaction([
      { type: 'delete', key: 'library-account/svc1' },
      { type: 'put', key: 'library-account/SVC1', value: Buffer.from(JSON.stringify({ ...lent, state: 'returning' })) },
      { type: 'put', key: 'wal/library/SVC1', value: Buffer.from(JSON.stringify({ id: 'old', target: 'library/SVC1', new_password: 'Legacy-Wal-Password-1', password_source: 'length:64', created: Date.now() })) },
      // And a legacy key whose lower-cased key is taken: it stays where it is.
      { type: 'put', key: 'library-account/Svc2', value: (await view.get('library-account/svc2'))! },
    ]);
    await resetPassword(facts, dnOf('svc1'), 'Legacy-Wal-Password-1');

    await store.restart();
    await expect.poll(async () => (await status('team')).SVC1, { timeout: 5000 }).toEqual({ available: true });
    expect(await mountStorage().list('library-account/')).toEqual(['Svc2', 'svc1', 'svc2']);
    expect(await mountStorage().list('wal/library/')).toEqual([]);
    expect(await binds('svc1', loan.password)).toBe(false);
    // svc2 was never returned, so it goes first (least recently returned).
    const other = await checkedOut('team');
    expect(other.name).toBe('svc2');
    expect(await binds('svc2', other.password)).toBe(true);
    const again = await checkedOut('team');
    expect(again).toMatchObject({ name: 'SVC1', password: 'Legacy-Wal-Password-1' });
    expect(await binds('svc1', again.password)).toBe(true);
  });
});

describe('check-in write-ahead', () => {
  it('"the claim and the new password\'s WAL are one commit: when it fails the loan is untouched, nothing is half-written, and a retry checks in"', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    await setUp({ team: { service_account_names: ['svc0'] } }, { storageInstance: storage });
    const loan = await checkedOut('team');
    storage.failNext((op) => op.type === 'put' && /\/wal\/library\//.test(op.key));
    expect((await checkIn('team', 'root', [loan.name])).status).toBe(500);
    // Still lent to the borrower (not half-claimed), no WAL, and the directory was not touched.
    expect(await status('team')).toMatchObject({ [loan.name]: { available: false, borrower_client_token: expect.any(String) } });
    const keys = await new StorageView(storage.inner, '').listRecursive();
    expect(keys.filter((k) => k.includes('/wal/'))).toEqual([]);
    expect(keys.some((k) => k.includes('/library-account/'))).toBe(true);
    expect(await binds(loan.name, loan.password)).toBe(true);
    const renewed = await s.request('PUT', 'sys/leases/renew', { body: { lease_id: loan.leaseId } });
    expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);

    expect((await checkIn('team', 'root', [loan.name])).body.data).toEqual({ check_ins: [loan.name] });
    expect(await binds(loan.name, loan.password)).toBe(false);
    expect((await status('team'))[loan.name]).toEqual({ available: true });
  });
});

