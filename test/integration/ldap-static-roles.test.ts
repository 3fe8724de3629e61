import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'ldapts';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { SqliteStorage } from '../../src/core/storage/sqlite.ts';
import type { StorageOp } from '../../src/core/storage/types.ts';
import { escapeDnValue } from '../../src/providers/ldap/dn.ts';
import { readWal, writeWal } from '../../src/engines/ldap/rotation.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, ok, mountStorage } from '../support/ldap-engine.ts';
import { FaultyStorage } from '../support/faulty-storage.ts';

const facts = inject('slapd');

let ou: IsolatedOu;
const servers: TestServer[] = [];
async function server(opts: Parameters<typeof startTestServer>[0] = {}): Promise<TestServer> {
  const s = await startTestServer(opts);
  servers.push(s);
  return s;
}
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 4 });
});
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close().catch(() => undefined);
  await ou.cleanup();
});

const user = (i: number) => ou.users[i]!;
const binds = (dn: string, password: string) => canBind(facts.url, dn, password);

/** Adds a person whose cn holds characters that are special in DNs and filters. */
async function addPerson(cn: string): Promise<{ dn: string; password: string }> {
  const dn = `cn=${escapeDnValue(cn)},${ou.usersDn}`;
  const password = randomBytes(12).toString('base64url');
  const c = new Client({ url: facts.url });
  try {
    await c.bind(facts.rootDn, facts.rootPassword);
    await c.add(dn, { objectClass: ['inetOrgPerson'], cn: [cn], sn: ['x'], userPassword: [password] });
  } finally {
    await c.unbind();
  }
  return { dn, password };
}

describe('static role lifecycle', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server();
    await configure(s, facts, ou);
  });

  it('creation rotates at once: the old password stops working, the served one binds', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    expect(await binds(user(0).dn, user(0).password)).toBe(false);
    const c = await cred(s, 'app');
    expect(Object.keys(c).sort()).toEqual(['dn', 'last_password', 'last_service_rotation', 'password', 'rotation_period', 'ttl', 'username']);
    expect(c).toMatchObject({ dn: '', username: 'user0', last_password: '', rotation_period: 3600 });
    expect(c.ttl).toBeGreaterThan(3590);
    expect(c.ttl).toBeLessThanOrEqual(3600);
    expect(Date.parse(c.last_service_rotation)).toBeGreaterThan(Date.now() - 60_000);
    expect(await binds(user(0).dn, c.password)).toBe(true);

    const r = await s.request('GET', 'ldap/static-role/app');
    expect(r.body.data).toEqual({
      dn: '', username: 'user0', rotation_period: 3600, rotation_schedule: '', rotation_window: 0, disable_automated_rotation: false, password_policy: '',
      last_service_rotation: c.last_service_rotation, next_rotation: new Date(Date.parse(c.last_service_rotation) + 3600_000).toISOString(), drifted: false,
    });
    // No lease for static credentials.
    expect((await s.request('GET', 'ldap/static-cred/app')).body.lease_id).toBe('');
  });

  it('by dn: the entry at that DN is rotated without a username search', async () => {
    await ok(s, 'POST', 'ldap/static-role/bydn', { username: 'anything', dn: user(1).dn, rotation_period: 60 });
    const c = await cred(s, 'bydn');
    expect(c.dn).toBe(user(1).dn);
    expect(await binds(user(1).dn, c.password)).toBe(true);
    expect(await binds(user(1).dn, user(1).password)).toBe(false);
  });

  it('rotate-role changes the password now; last_password is the previous one; names are case-insensitive', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const first = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/rotate-role/APP');
    const second = await cred(s, 'app');
    expect(second.password).not.toBe(first.password);
    expect(second.last_password).toBe(first.password);
    expect(await binds(user(0).dn, second.password)).toBe(true);
    expect(await binds(user(0).dn, first.password)).toBe(false);
  });

  it('concurrent rotate-role calls of one role serialise and end with a password that binds', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const results = await Promise.all(Array.from({ length: 5 }, () => s.request('POST', 'ldap/rotate-role/app')));
    expect(results.map((r) => r.status)).toEqual([204, 204, 204, 204, 204]);
    expect(await binds(user(0).dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('skip_import_rotation: the directory is untouched and no password is served until the first rotation', async () => {
    await ok(s, 'POST', 'ldap/static-role/skip', { username: 'user0', rotation_period: '1h', skip_import_rotation: true });
    expect(await binds(user(0).dn, user(0).password)).toBe(true);
    const c = await cred(s, 'skip');
    expect(c).toMatchObject({ password: '', last_password: '', last_service_rotation: '0001-01-01T00:00:00Z' });
    expect((await s.request('GET', 'ldap/static-role/skip')).body.data).not.toHaveProperty('last_service_rotation');
    await ok(s, 'POST', 'ldap/rotate-role/skip');
    const after = await cred(s, 'skip');
    expect(after.last_password).toBe('');
    expect(await binds(user(0).dn, after.password)).toBe(true);
  });

  it("the config's skip_static_role_import_rotation is the default; the role's value overrides it", async () => {
    await ok(s, 'POST', 'ldap/config', { skip_static_role_import_rotation: true });
    await ok(s, 'POST', 'ldap/static-role/a', { username: 'user0', rotation_period: '1h' });
    expect(await binds(user(0).dn, user(0).password)).toBe(true);
    await ok(s, 'POST', 'ldap/static-role/b', { username: 'user1', rotation_period: '1h', skip_import_rotation: false });
    expect(await binds(user(1).dn, user(1).password)).toBe(false);
  });

  it.each([
    [{ rotation_period: 60 }, 'username is a required field'],
    [{ username: '', rotation_period: 60 }, 'username must not be empty'],
    [{ username: 'user0' }, 'rotation_period, rotation_schedule: one of rotation_period and rotation_schedule is required'],
    [{ username: 'user0', rotation_period: 4 }, 'rotation_period must be 5 seconds or more'],
    [{ username: 'user0', rotation_period: 'abc' }, 'rotation_period'],
    [{ username: 'user0', rotation_period: 60, dn: 'not a dn' }, 'dn'],
    [{ username: 'nobody', rotation_period: 60 }, 'username: no entry with the configured userattr equal to "nobody"'],
    [{ username: 'x', dn: `cn=ghost,${'ou=users,' + 'dc=strongroom,dc=test'}`, rotation_period: 60 }, 'dn: no entry'],
  ])('create %j is a 400 containing %s, and nothing is stored', async (body, message) => {
    const r = await s.request('POST', 'ldap/static-role/bad', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(message);
    expect((await s.request('GET', 'ldap/static-role/bad')).status).toBe(404);
    expect(await binds(user(0).dn, user(0).password)).toBe(true);
  });

  it('update: username and dn are immutable, skip_import_rotation is refused, the period and a cleared dn are accepted', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', dn: user(0).dn, rotation_period: '1h' });
    const before = await cred(s, 'app');
    for (const [body, message] of [
      [{ username: 'user1' }, 'cannot update static account username'],
      [{ dn: user(1).dn }, 'cannot update static account distinguished name (dn)'],
      [{ skip_import_rotation: false }, 'skip_import_rotation has no effect on updates'],
      [{ rotation_period: 2 }, 'rotation_period must be 5 seconds or more'],
    ] as const) {
      const r = await s.request('POST', 'ldap/static-role/app', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0]).toContain(message);
    }
    // Same username / same DN in another spelling are no change.
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', dn: user(0).dn.toUpperCase() });
    await ok(s, 'POST', 'ldap/static-role/app', { rotation_period: '2h', dn: '' });
    const r = (await s.request('GET', 'ldap/static-role/app')).body.data;
    expect(r).toMatchObject({ dn: '', rotation_period: 7200 });
    const after = await cred(s, 'app');
    // An update never rotates; the period counts from the last rotation.
    expect(after.password).toBe(before.password);
    expect(after.ttl).toBeGreaterThan(7100);
    // With the dn cleared, rotation finds the entry by username.
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect(await binds(user(0).dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('unknown roles: static-cred 404 (Vault answers 400: docs/decisions.md), rotate-role 400, read 404, delete 204', async () => {
    let r = await s.request('GET', 'ldap/static-cred/ghost');
    expect(r.status).toBe(404);
    expect(r.body.errors).toEqual(['unknown role: ghost']);
    r = await s.request('POST', 'ldap/rotate-role/ghost');
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(["role doesn't exist: ghost"]);
    expect((await s.request('GET', 'ldap/static-role/ghost')).status).toBe(404);
    expect((await s.request('DELETE', 'ldap/static-role/ghost')).status).toBe(204);
  });

  it('delete stops management: the directory keeps the last password, the account can be managed again', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const c = await cred(s, 'app');
    expect((await s.request('DELETE', 'ldap/static-role/app')).status).toBe(204);
    expect((await s.request('GET', 'ldap/static-role/app')).status).toBe(404);
    expect(await binds(user(0).dn, c.password)).toBe(true);
    await ok(s, 'POST', 'ldap/static-role/again', { username: 'user0', rotation_period: '1h' });
  });

  it('hierarchical names: LIST returns direct children, prefixes end in "/", names are lower-cased', async () => {
    for (const [i, name] of ['org/platform/dev', 'org/platform/prod', 'org/a', 'Top'].entries()) {
      await ok(s, 'POST', `ldap/static-role/${name}`, { username: `user${i}`, rotation_period: 60, skip_import_rotation: true });
    }
    expect((await s.request('LIST', 'ldap/static-role')).body.data.keys).toEqual(['org/', 'top']);
    expect((await s.request('LIST', 'ldap/static-role/org')).body.data.keys).toEqual(['a', 'platform/']);
    expect((await s.request('LIST', 'ldap/static-role/org/platform/')).body.data.keys).toEqual(['dev', 'prod']);
    expect((await s.request('GET', 'ldap/static-role/ORG/Platform/Dev')).body.data.username).toBe('user0');
    expect((await cred(s, 'org/platform/prod')).username).toBe('user1');
    expect((await s.request('LIST', 'ldap/static-role/nothing/')).status).toBe(404);
  });

  it('names that do not start and end with a word character match no role path', async () => {
    expect((await s.request('POST', 'ldap/static-role/-bad', { body: { username: 'user0', rotation_period: 60 } })).status).toBe(404);
    expect((await s.request('POST', 'ldap/static-role/bad/', { body: { username: 'user0', rotation_period: 60 } })).status).toBe(405);
    expect((await s.request('GET', 'ldap/static-cred/bad-')).status).toBe(404);
    expect((await s.request('POST', 'ldap/rotate-role/.x')).status).toBe(404);
  });
});

describe('LIST ldap/static-role/', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: 60, skip_import_rotation: true });
  });

  const tokenWith = async (capabilities: string[]): Promise<string> => {
    const name = `p${randomBytes(4).toString('hex')}`;
    await ok(s, 'PUT', `sys/policies/acl/${name}`, { policy: `path "ldap/static-role/*" { capabilities = ${JSON.stringify(capabilities)} }` });
    return (await ok(s, 'POST', 'auth/token/create', { policies: [name] })).auth.client_token;
  };

  it('"the role list is a list operation only: read on the list path answers no list (Vault has list only)"', async () => {
    const reader = await tokenWith(['read']);
    const r = await s.request('GET', 'ldap/static-role/', { token: reader });
    expect([404, 405], `${r.status} ${JSON.stringify(r.body)}`).toContain(r.status);
    expect(JSON.stringify(r.body)).not.toContain('app');
    // Not even root reads a list there.
    for (const path of ['ldap/static-role/', 'ldap/static-role']) expect((await s.request('GET', path)).status, path).toBe(405);
    expect((await s.request('LIST', 'ldap/static-role/', { token: reader })).status).toBe(403);
    // A role itself is still read with read.
    expect((await s.request('GET', 'ldap/static-role/app', { token: reader })).body.data.username).toBe('user0');
  });

  it('"LIST works with the list capability"', async () => {
    const lister = await tokenWith(['list']);
    const r = await s.request('LIST', 'ldap/static-role/', { token: lister });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.data.keys).toEqual(['app']);
  });
});

describe('one account, one manager', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server();
    await configure(s, facts, ou);
  });

  it('a second role for the same account is a 400 naming the owner, whatever the spelling', async () => {
    await ok(s, 'POST', 'ldap/static-role/first', { username: 'user0', rotation_period: '1h' });
    const served = (await cred(s, 'first')).password;
    for (const body of [
      { username: 'user0', rotation_period: 60 },
      { username: 'USER0', rotation_period: 60 },
      { username: 'someone', dn: user(0).dn, rotation_period: 60 },
      { username: 'someone', dn: user(0).dn.toUpperCase().replace(/,/g, ', '), rotation_period: 60 },
      { username: 'user0', rotation_period: 60, skip_import_rotation: true },
    ]) {
      const r = await s.request('POST', 'ldap/static-role/second', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0]).toMatch(/is already managed by the secrets engine \(static role "first"\)/);
    }
    // The first role's password was not touched by the refused attempts.
    expect(await binds(user(0).dn, served)).toBe(true);
  });

  it('concurrent creates of two roles for one account: exactly one wins', async () => {
    const results = await Promise.all(['r1', 'r2', 'r3'].map((name) =>
      s.request('POST', `ldap/static-role/${name}`, { body: { username: 'user2', rotation_period: '1h' } })));
    expect(results.map((r) => r.status).sort()).toEqual([204, 400, 400]);
    const winner = ['r1', 'r2', 'r3'][results.findIndex((r) => r.status === 204)]!;
    expect(await binds(user(2).dn, (await cred(s, winner)).password)).toBe(true);
  });
});

describe('rotation of a role found by username', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server();
    await configure(s, facts, ou);
  });

  /** Renames and moves an entry (modrdn with a new superior), as an administrator reorganising the tree would. */
  async function move(from: string, to: string): Promise<void> {
    const c = new Client({ url: facts.url });
    try {
      await c.bind(facts.rootDn, facts.rootPassword);
      await c.modifyDN(from, to);
    } finally {
      await c.unbind();
    }
  }

  it('a static role whose entry was moved is re-resolved by search and rotated; the registry claim follows the entry', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user3', rotation_period: '1h' });
    const moved = `cn=user3,${ou.serviceAccountsDn}`;
    await move(user(3).dn, moved);

    // The stored DN answers noSuchObject; the username search finds the entry at its new place.
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const c = await cred(s, 'app');
    expect(await binds(moved, c.password)).toBe(true);
    // Further rotations write to the new DN directly (its claim is now the role's).
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect(await binds(moved, (await cred(s, 'app')).password)).toBe(true);
    const other = await s.request('POST', 'ldap/static-role/other', { body: { username: 'someone', dn: moved, rotation_period: 60 } });
    expect(other.status).toBe(400);
    expect(other.body.errors[0]).toMatch(/already managed by the secrets engine \(static role "app"\)/);
    // The old DN's claim was released: an entry created there later can be managed by another role.
    const newcomer = await addPerson('user3-newcomer');
    await move(newcomer.dn, user(3).dn);
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'someone', dn: user(3).dn, rotation_period: 60 });
    expect(await binds(user(3).dn, (await cred(s, 'other')).password)).toBe(true);
    expect(await binds(moved, (await cred(s, 'app')).password)).toBe(true);
  });

  it('a role addressed by dn is never re-resolved: a moved entry fails the rotation and is reported', async () => {
    await ok(s, 'POST', 'ldap/static-role/bydn', { username: 'user3', dn: user(3).dn, rotation_period: '1h' });
    const before = (await cred(s, 'bydn')).password;
    await move(user(3).dn, `cn=user3,${ou.serviceAccountsDn}`);
    const r = await s.request('POST', 'ldap/rotate-role/bydn');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/retries will continue in the background/);
    expect((await cred(s, 'bydn')).password).toBe(before);
    expect((await s.request('GET', 'ldap/static-role/bydn')).body.data.last_rotation_error.message).toMatch(/^update password of "cn=user3,/);
  });

  it('a role created without a config finds its entry at the first rotation and claims it', async () => {
    const bare = await server();
    await ok(bare, 'POST', 'ldap/static-role/early', { username: 'user2', rotation_period: '1h', skip_import_rotation: true });
    await configure(bare, facts, ou);
    await ok(bare, 'POST', 'ldap/rotate-role/early');
    expect(await binds(user(2).dn, (await cred(bare, 'early')).password)).toBe(true);
    const r = await bare.request('POST', 'ldap/static-role/again', { body: { username: 'x', dn: user(2).dn, rotation_period: 60 } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/static role "early"/);
  });
});

describe('injection attempts', () => {
  let s: TestServer;
  beforeEach(async () => {
    s = await server();
    await configure(s, facts, ou);
  });

  it('filter metacharacters in a username match literally (and here match nothing)', async () => {
    for (const username of ['*', '*)(cn=*', 'user0)(cn=user1', 'user*', '\\2a']) {
      const r = await s.request('POST', 'ldap/static-role/evil', { body: { username, rotation_period: 60 } });
      expect(r.status, username).toBe(400);
      expect(r.body.errors[0]).toContain('no entry');
    }
    for (const u of ou.users) expect(await binds(u.dn, u.password)).toBe(true);
  });

  it('entries whose names hold , + \\ ( ) * are found by username and by DN, and only they change', async () => {
    const odd = await addPerson('a,b+c\\d');
    const star = await addPerson('(star*)');
    await ok(s, 'POST', 'ldap/static-role/odd', { username: 'a,b+c\\d', rotation_period: 60 });
    await ok(s, 'POST', 'ldap/static-role/star', { username: 'x', dn: star.dn, rotation_period: 60 });
    expect(await binds(odd.dn, (await cred(s, 'odd')).password)).toBe(true);
    expect(await binds(star.dn, (await cred(s, 'star')).password)).toBe(true);
    expect(await binds(odd.dn, odd.password)).toBe(false);
    for (const u of ou.users) expect(await binds(u.dn, u.password)).toBe(true);
  });

  it('a DN naming another subtree through an escaped comma is one RDN, not a path', async () => {
    const fake = `cn=user0\\,ou\\=users,${ou.dn}`;
    const r = await s.request('POST', 'ldap/static-role/evil', { body: { username: 'x', dn: fake, rotation_period: 60 } });
    expect(r.status).toBe(400);
    expect(await binds(user(0).dn, user(0).password)).toBe(true);
  });
});

describe('scheduled rotation', () => {
  it('rotates on the period (fake clock): new password binds, last_password is the old one', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: 5 });
    const first = await cred(s, 'app');
    expect(first.ttl).toBe(5);
    await clock.advance(4000);
    expect((await cred(s, 'app')).password).toBe(first.password);
    await clock.advance(1000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(first.password), { timeout: 5000 });
    const second = await cred(s, 'app');
    expect(second.last_password).toBe(first.password);
    expect(await binds(user(0).dn, second.password)).toBe(true);
    // And again on the next period.
    await clock.advance(5000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(second.password), { timeout: 5000 });
  });

  it('rotates on the period with the real clock', async () => {
    const s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: 5 });
    const first = await cred(s, 'app');
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(first.password), { timeout: 8000, interval: 250 });
    expect(await binds(user(0).dn, (await cred(s, 'app')).password)).toBe(true);
  }, 15_000);

  it('many roles rotate together through the bounded pool', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    const many = await createIsolatedOu(facts, { users: 24, serviceAccounts: 0 });
    try {
      await configure(s, facts, many);
      for (const u of many.users) await ok(s, 'POST', `ldap/static-role/${u.name}`, { username: u.name, rotation_period: 10, skip_import_rotation: true });
      await clock.advance(10_000);
      await vi.waitFor(async () => {
        for (const u of many.users) expect((await cred(s, u.name)).password).not.toBe('');
      }, { timeout: 10_000 });
      for (const u of many.users) expect(await binds(u.dn, (await cred(s, u.name)).password)).toBe(true);
    } finally {
      await many.cleanup();
    }
  });

  it('a failing rotation is visible on the role, retried with backoff, and recovers', async () => {
    const clock = new FakeClock(Date.now());
    const s = await server({ clock });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: 5 });
    const first = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    await clock.advance(5000);
    const attempts = async () => (await s.request('LIST', 'ldap/rotation-failures')).body.data?.key_info.app.attempts;
    await vi.waitFor(async () => expect(await attempts()).toBe(1), { timeout: 5000 });
    const role = (await s.request('GET', 'ldap/static-role/app')).body.data;
    expect(role.last_rotation_error.message).toContain('failed to bind');
    expect(role.last_rotation_error.message).not.toContain('broken');
    // First retry waits between half and all of the 10 s base.
    const ttl = (await cred(s, 'app')).ttl;
    expect(ttl).toBeGreaterThanOrEqual(5);
    expect(ttl).toBeLessThanOrEqual(10);
    expect((await cred(s, 'app')).password).toBe(first.password);
    await clock.advance(10_000);
    await vi.waitFor(async () => expect(await attempts()).toBe(2), { timeout: 5000 });
    // Second retry: 10-20 s after the failure, which happened somewhere inside the 10 s just advanced.
    expect((await cred(s, 'app')).ttl).toBeGreaterThanOrEqual(5);
    expect((await cred(s, 'app')).ttl).toBeLessThanOrEqual(20);
    await ok(s, 'POST', 'ldap/config', { bindpass: ou.engine.password });
    await clock.advance(20_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(first.password), { timeout: 5000 });
    const healed = (await s.request('GET', 'ldap/static-role/app')).body.data;
    expect(healed).not.toHaveProperty('last_rotation_error');
    expect(await binds(user(0).dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('a manual rotation that fails reports 502 with the retry note and records the failure', async () => {
    const s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/config', { bindpass: 'broken' });
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(502);
    expect(r.body.errors[0]).toMatch(/^unable to finish rotating credentials; retries will continue in the background/);
    expect((await s.request('GET', 'ldap/static-role/app')).body.data.last_rotation_error.message).toContain('failed to bind');
  });
});

/** A data directory the servers of one test share (startTestServer removes only directories it made). */
function dataDirectory(): string {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-ldap-'));
  dirs.push(dir);
  return dir;
}
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('restarts', () => {
  const unsealKey = randomBytes(32).toString('base64');

  it('neither rotates early nor forgets a due rotation', async () => {
    const t0 = Date.now();
    const dataDir = dataDirectory();
    const s1 = await server({ storage: 'sqlite', dataDir, unsealKey, clock: new FakeClock(t0) });
    await configure(s1, facts, ou);
    await ok(s1, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s1, 'POST', 'ldap/static-role/skipped', { username: 'user1', rotation_period: '1h', skip_import_rotation: true });
    const p0 = (await cred(s1, 'app')).password;
    await s1.close();

    // 30 minutes later: nothing is due.
    const clock2 = new FakeClock(t0 + 30 * 60_000);
    const s2 = await server({ storage: 'sqlite', dataDir, unsealKey, clock: clock2 });
    await new Promise((r) => setTimeout(r, 300));
    expect((await cred(s2, 'app')).password).toBe(p0);
    expect((await cred(s2, 'skipped')).password).toBe('');
    expect(await binds(user(1).dn, user(1).password)).toBe(true);
    expect((await cred(s2, 'app')).ttl).toBe(1800);
    await s2.close();

    // Two hours later: the overdue rotations run at start-up.
    const clock3 = new FakeClock(t0 + 2 * 3600_000);
    const s3 = await server({ storage: 'sqlite', dataDir, unsealKey, clock: clock3 });
    await clock3.advance(1); // fake timers fire only when time moves, even when already due
    await vi.waitFor(async () => {
      expect((await cred(s3, 'app')).password).not.toBe(p0);
      expect((await cred(s3, 'skipped')).password).not.toBe('');
    }, { timeout: 5000 });
    expect(await binds(user(0).dn, (await cred(s3, 'app')).password)).toBe(true);
    expect(await binds(user(1).dn, (await cred(s3, 'skipped')).password)).toBe(true);
    expect((await cred(s3, 'skipped')).last_password).toBe('');
  });
});

/** The commit that records a rotation and releases its WAL entry. */
const walRelease = (op: StorageOp) => op.type === 'delete' && /\/wal\/static-role\//.test(op.key);

describe('write-ahead log', () => {
  const unsealKey = randomBytes(32).toString('base64');

  it('storage fails after the directory modify: the WAL keeps the password and the retry finishes with it', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    const s = await server({ storageInstance: storage });
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await cred(s, 'app');

    storage.failNext(walRelease);
    const r = await s.request('POST', 'ldap/rotate-role/app');
    expect(r.status).toBe(500);
    expect(r.body.errors[0]).toContain('kept in the write-ahead log');
    const wal = await readWal(mountStorage(s), 'static-role/app');
    expect(wal).toBeDefined();
    // The directory already has the WAL password; the stored one is stale until the retry.
    expect(await binds(user(0).dn, wal!.new_password)).toBe(true);
    expect(await binds(user(0).dn, before.password)).toBe(false);

    await ok(s, 'POST', 'ldap/rotate-role/app');
    const after = await cred(s, 'app');
    expect(after.password).toBe(wal!.new_password);
    expect(after.last_password).toBe(before.password);
    expect(await binds(user(0).dn, after.password)).toBe(true);
    expect(await readWal(mountStorage(s), 'static-role/app')).toBeUndefined();
  });

  it('storage fails during role creation after the modify: the role is kept and finished by the retry', async () => {
    const storage = new FaultyStorage(new MemoryStorage());
    const clock = new FakeClock(Date.now());
    const s = await server({ storageInstance: storage, clock });
    await configure(s, facts, ou);
    storage.failNext(walRelease);
    const r = await s.request('POST', 'ldap/static-role/app', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(500);
    expect(await binds(user(0).dn, user(0).password)).toBe(false);
    expect((await s.request('GET', 'ldap/static-role/app')).body.data.last_rotation_error.message).toContain('kept in the write-ahead log');
    await clock.advance(10_000);
    await vi.waitFor(async () => expect((await cred(s, 'app')).password).not.toBe(''), { timeout: 5000 });
    expect(await binds(user(0).dn, (await cred(s, 'app')).password)).toBe(true);
  });

  it('a process that dies after the modify (commit never written) serves the WAL password after restart', async () => {
    const dataDir = dataDirectory();
    const path = join(dataDir, 'strongroom.db');
    const flaky = new FaultyStorage(new SqliteStorage(path));
    const s2 = await server({ storageInstance: flaky, dataDir, unsealKey });
    await configure(s2, facts, ou);
    await ok(s2, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await cred(s2, 'app');
    flaky.failNext(walRelease);
    expect((await s2.request('POST', 'ldap/rotate-role/app')).status).toBe(500);
    // "Crash": close without any retry.
    await s2.close();

    const s3 = await server({ storage: 'sqlite', dataDir, unsealKey });
    await vi.waitFor(async () => expect((await cred(s3, 'app')).password).not.toBe(before.password), { timeout: 5000 });
    const after = await cred(s3, 'app');
    expect(after.last_password).toBe(before.password);
    expect(await binds(user(0).dn, after.password)).toBe(true);
  });

  it('a crash between writing the WAL and the modify: start-up applies the WAL password', async () => {
    const dataDir = dataDirectory();
    const s1 = await server({ storage: 'sqlite', dataDir, unsealKey });
    await configure(s1, facts, ou);
    await ok(s1, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const before = await cred(s1, 'app');
    await writeWal(mountStorage(s1), {
      id: 'crash', target: 'static-role/app', new_password: 'Wal-Password-0123456789', password_source: 'length:64', dn: '', created: Date.now(),
    });
    // A WAL for a role that no longer exists is dropped at start-up.
    await writeWal(mountStorage(s1), { id: 'orphan', target: 'static-role/gone', new_password: 'x', password_source: 'length:64', dn: '', created: Date.now() });
    await s1.close();

    const s2 = await server({ storage: 'sqlite', dataDir, unsealKey });
    await vi.waitFor(async () => expect((await cred(s2, 'app')).password).toBe('Wal-Password-0123456789'), { timeout: 5000 });
    expect((await cred(s2, 'app')).last_password).toBe(before.password);
    expect(await binds(user(0).dn, 'Wal-Password-0123456789')).toBe(true);
    expect(await readWal(mountStorage(s2), 'static-role/app')).toBeUndefined();
    expect(await readWal(mountStorage(s2), 'static-role/gone')).toBeUndefined();
  });

  it('a failed creation (directory refuses) leaves no role, no WAL and no claim', async () => {
    const s = await server();
    await configure(s, facts, ou, { password_policy: 'missing' });
    expect((await s.request('POST', 'ldap/static-role/app', { body: { username: 'user0', rotation_period: 60 } })).status).toBe(400);
    expect(await readWal(mountStorage(s), 'static-role/app')).toBeUndefined();
    await ok(s, 'POST', 'ldap/config', { password_policy: '' });
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'user0', rotation_period: 60 });
  });
});
