/**
 * The engine never manages itself (audit finding 6): no static role, library set member or dynamic-role LDIF
 * may name the account the engine binds as, however it is spelled, and the config may not bind as an
 * account a role or set already manages. Every refusal is proven against slapd: the bind password still
 * binds afterwards.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { canBind, createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, mountStorage, ok, ouConfig } from '../support/ldap-engine.ts';
import { startNode, type NodeProcess } from '../support/node-process.ts';

const facts = inject('slapd');

let s: TestServer;
let ou: IsolatedOu;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 2 });
  s = await startTestServer();
});
afterEach(async () => {
  await s.close();
  await ou.cleanup();
});

/** The bind account's password is the one the test seeded: nothing changed it. */
const bindPasswordUntouched = async () => expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(true);

const BINDS_AS = 'is the account this secrets engine binds as; only rotate-root changes its password';

/** `ou=<id>` of the isolated OU, for spellings that rewrite every RDN. */
const ouId = () => ou.dn.slice('ou='.length, ou.dn.indexOf(','));

/**
 * Spellings of the bind DN that name the same entry in slapd: the static-role table proves it (slapd resolves each
 * to the bind entry, or the answer would be "no entry"); the LDIF table then relies on the engine's own comparison.
 */
const BIND_DN_SPELLINGS: Array<[string, () => string]> = [
  ['as configured', () => ou.engine.dn],
  ['upper case', () => ou.engine.dn.toUpperCase()],
  ['spaces around "=" and ","', () => `cn = engine , ou = ${ouId()} , dc = strongroom , dc = test`],
  ['trailing spaces', () => `cn=engine   ,ou=${ouId()},dc=strongroom,dc=test  `],
  ['hex-escaped characters', () => `cn=\\65\\6E\\67\\69\\6E\\65,ou=${ouId()},dc=strongroom,dc=test`],
  ['escaped leading and trailing spaces', () => `cn=\\ engine\\ ,ou=${ouId()},dc=strongroom,dc=test`],
  ['an OID for the attribute type', () => `2.5.4.3=engine,ou=${ouId()},dc=strongroom,dc=test`],
  ['long attribute type names', () => `commonName=engine,organizationalUnitName=${ouId()},domainComponent=strongroom,dc=test`],
  ['full-width letters', () => `cn=ｅｎｇｉｎｅ,ou=${ouId()},dc=strongroom,dc=test`],
  ['a dotted capital I', () => `cn=ENGİNE,ou=${ouId()},dc=strongroom,dc=test`],
];

describe('POST ldap/static-role/:name', () => {
  beforeEach(() => configure(s, facts, ou));

  it.each(BIND_DN_SPELLINGS)('"a static role may not manage the bind account": dn spelled %s is a 400 naming dn', async (_spelling, dn) => {
    const r = await s.request('POST', 'ldap/static-role/takeover', { body: { username: 'takeover', dn: dn(), rotation_period: '1h' } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "dn": the entry ${BINDS_AS}`);
    expect((await s.request('GET', 'ldap/static-role/takeover')).status).toBe(404);
    await bindPasswordUntouched();
  });

  it.each(['engine', 'ENGINE', ' Engine '])('"a username that resolves to the bind account is refused too": %j is a 400 naming username', async (username) => {
    const r = await s.request('POST', 'ldap/static-role/takeover', { body: { username, rotation_period: '1h' } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "username": the account ${BINDS_AS}`);
    await bindPasswordUntouched();
  });

  it('"the refusal is the same with skip_import_rotation: the role is not stored and claims nothing"', async () => {
    const r = await s.request('POST', 'ldap/static-role/takeover', { body: { username: 'engine', rotation_period: '1h', skip_import_rotation: true } });
    expect(r.status).toBe(400);
    // Nothing was claimed: the config may still be rewritten with the same bind account.
    await ok(s, 'POST', 'ldap/config', ouConfig(facts, ou));
  });
});

describe('POST ldap/rotate-role/:name', () => {
  it('"a role that names the bind account only once the config exists is never rotated: 400, the bind password untouched"', async () => {
    // Before any config nothing can tell which account the engine will bind as, and the registry holds only the username.
    await ok(s, 'POST', 'ldap/static-role/early', { username: 'engine', rotation_period: '1h', skip_import_rotation: true });
    await configure(s, facts, ou);
    const r = await s.request('POST', 'ldap/rotate-role/early');
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain(`dn: "${ou.engine.dn}" ${BINDS_AS}`);
    // Its static-cred is refused like any role on the bind account (the directory names the entry).
    expect((await s.request('GET', 'ldap/static-cred/early')).status).toBe(403);
    await bindPasswordUntouched();
    // The refusal is recorded on the role, like any failed rotation.
    expect((await s.request('GET', 'ldap/static-role/early')).body.data.last_rotation_error.message).toContain(BINDS_AS);
  });
});

describe('POST ldap/library/:set_name', () => {
  beforeEach(() => configure(s, facts, ou));

  it.each([['engine'], ['ENGINE']])('"a library set may not lend the bind account": %s is a 400 naming service_account_names, nothing is changed', async (name) => {
    const r = await s.request('POST', 'ldap/library/takeover', { body: { service_account_names: ['svc0', name] } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "service_account_names": element 2 ${BINDS_AS}`);
    expect((await s.request('GET', 'ldap/library/takeover')).status).toBe(404);
    // svc0 came first and was not enrolled either: its seeded password still works.
    expect(await canBind(facts.url, ou.serviceAccounts[0]!.dn, ou.serviceAccounts[0]!.password)).toBe(true);
    await bindPasswordUntouched();
  });

  it('"adding the bind account to an existing set is refused and leaves the set as it was"', async () => {
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc0'] });
    const r = await s.request('POST', 'ldap/library/team', { body: { service_account_names: ['svc0', 'Engine'] } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('service_account_names');
    expect((await s.request('GET', 'ldap/library/team')).body.data.service_account_names).toEqual(['svc0']);
    await bindPasswordUntouched();
  });
});

/** A modify of the bind account's password: the LDIF a role writer would use to take it over. */
const takeOver = (dn: string) => `dn: ${dn}\nchangetype: modify\nreplace: userPassword\nuserPassword: {{.Password}}\n-\n`;
const harmless = () => ({
  creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
  deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
});

describe('POST ldap/role/:name', () => {
  beforeEach(() => configure(s, facts, ou));

  it.each([
    ...BIND_DN_SPELLINGS,
    ['base64 (dn::)', () => ou.engine.dn] as [string, () => string],
  ])('"no LDIF record may name the bind account": a DN spelled %s is a 400 naming creation_ldif', async (spelling, dn) => {
    const creation = spelling.startsWith('base64')
      ? takeOver(dn()).replace(/^dn: .*$/m, `dn:: ${Buffer.from(dn()).toString('base64')}`)
      : takeOver(dn());
    const r = await s.request('POST', 'ldap/role/takeover', { body: { ...harmless(), creation_ldif: creation } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "creation_ldif": the record at line 1 ${BINDS_AS}`);
    expect((await s.request('GET', 'ldap/role/takeover')).status).toBe(404);
  });

  it.each(['deletion_ldif', 'rollback_ldif'])('"every LDIF field is checked": the bind account in %s is a 400 naming it', async (field) => {
    const r = await s.request('POST', 'ldap/role/takeover', { body: { ...harmless(), [field]: `dn: ${ou.engine.dn.toUpperCase()}\nchangetype: delete\n` } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "${field}": the record at line 1 ${BINDS_AS}`);
  });

  it('"a DN the engine cannot read as a DN cannot be compared, so it is refused" (slapd would take ";" as ",")', async () => {
    const r = await s.request('POST', 'ldap/role/takeover', { body: { ...harmless(), creation_ldif: takeOver(ou.engine.dn.replace(/,/g, ';')) } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe('invalid value for field "creation_ldif": the record at line 1 has a DN that is not valid (RFC 4514)');
  });
});

describe('GET ldap/creds/:name', () => {
  beforeEach(() => configure(s, facts, ou));

  it('"a template steered to the bind account at issue time is a 400 and nothing reaches the directory"', async () => {
    // With the sample username ("testuser") this role passes the write-time check; the real username is "engine".
    const creation = takeOver(`cn={{.Username}},${ou.dn}`);
    await ok(s, 'POST', 'ldap/role/steered', { ...harmless(), creation_ldif: creation, username_template: 'engine' });
    const r = await s.request('GET', 'ldap/creds/steered');
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "creation_ldif": the record at line 1 ${BINDS_AS}`);
    await bindPasswordUntouched();
    // No lease was registered for it.
    expect((await s.request('LIST', 'sys/leases/lookup/ldap/creds/steered/')).status).toBe(404);
  });

  it('"the deletion LDIF is checked at issue time too, before the account is created"', async () => {
    await ok(s, 'POST', 'ldap/role/steered', { ...harmless(), deletion_ldif: `dn: cn=e{{.Username}},${ou.dn}\nchangetype: delete\n`, username_template: 'ngine' });
    const r = await s.request('GET', 'ldap/creds/steered');
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toBe(`invalid value for field "deletion_ldif": the record at line 1 ${BINDS_AS}`);
    // The creation LDIF (cn=ngine under users) was not run.
    expect(await readEntry(facts, `cn=ngine,${ou.usersDn}`)).toBeUndefined();
    await bindPasswordUntouched();
  });
});

describe('POST ldap/config', () => {
  it('"binddn may not be an account a static role manages, however it is spelled": 400 naming the role', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const spelled = ou.users[0]!.dn.toUpperCase().replace(/,/g, ' , ');
    const r = await s.request('POST', 'ldap/config', { body: { binddn: spelled, bindpass: (await cred(s, 'app')).password } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toMatch(/^binddn: the account is one this secrets engine manages \(static role "app"\)/);
    expect((await s.request('GET', 'ldap/config')).body.data.binddn).toBe(ou.engine.dn);
  });

  it('"binddn may not be an account a library set lends": 400 naming the set', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc1'] });
    const r = await s.request('POST', 'ldap/config', { body: { binddn: ou.serviceAccounts[1]!.dn } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain('(library set "team")');
  });

  it('"the first config is checked against roles made before it"', async () => {
    await ok(s, 'POST', 'ldap/static-role/early', { username: 'x', dn: ou.engine.dn.toUpperCase(), rotation_period: '1h', skip_import_rotation: true });
    const r = await s.request('POST', 'ldap/config', { body: ouConfig(facts, ou) });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain('(static role "early")');
  });

  it('"a UPN bind is the account whose username is that UPN where usernames are UPNs (userattr userPrincipalName)"', async () => {
    await ok(s, 'POST', 'ldap/static-role/svc', { username: 'Svc@Example.org', rotation_period: '1h', skip_import_rotation: true });
    const upn = { url: facts.url, binddn: 'svc', upndomain: 'example.org', bindpass: 'x' };
    const r = await s.request('POST', 'ldap/config', { body: { ...upn, schema: 'ad' } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain('(static role "svc")');
    // Where usernames are another attribute, "svc@example.org" names some other entry.
    await ok(s, 'POST', 'ldap/config', { ...upn, schema: 'ad', userattr: 'sAMAccountName' });
  });

  it('"a write that keeps the bind account is not checked again" (roles written by earlier versions do not block other changes)', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/config', { request_timeout: 7, binddn: ou.engine.dn });
    expect((await s.request('GET', 'ldap/config')).body.data.request_timeout).toBe(7);
  });
});

/**
 * Roles an earlier version let manage the bind account (audit 2026-11-28, item f): written straight into storage as
 * that version stored them, since no API call can make one now.
 */
describe('GET ldap/static-cred/:name of a role on the bind account', () => {
  const legacyRole = (name: string, fields: Record<string, unknown>) => ({
    name, password: ou.engine.password, last_password: '', last_rotation: Date.now() - 60_000, next_rotation: Date.now() + 3_600_000, rotation_period: 3600, ...fields,
  });
  const LEGACY: Array<[string, () => Record<string, unknown>]> = [
    ['by DN as configured', () => ({ username: 'engine', dn: ou.engine.dn })],
    ['by DN in another spelling', () => ({ username: 'x', dn: `CN = Engine , ${ou.dn.toUpperCase()}` })],
    ['by resolved DN', () => ({ username: 'engine', resolved_dn: ou.engine.dn.toUpperCase() })],
    ['by username alone (no DN stored: the directory is asked)', () => ({ username: 'ENGINE' })],
  ];

  it.each(LEGACY)('"is refused with a 403 that holds no password": %s', async (_label, fields) => {
    await configure(s, facts, ou);
    await mountStorage(s).putJson('static-role/legacy', legacyRole('legacy', fields()));
    const r = await s.request('GET', 'ldap/static-cred/legacy');
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.errors[0]).toMatch(/manages the account the secrets engine binds as/);
    expect(JSON.stringify(r.body)).not.toContain(ou.engine.password);
    await bindPasswordUntouched();
  });

  it('"a role on another account is still served"', async () => {
    await configure(s, facts, ou);
    const user = ou.users[0]!;
    await mountStorage(s).putJson('static-role/other', legacyRole('other', { username: user.name, dn: user.dn, password: user.password }));
    expect((await cred(s, 'other')).password).toBe(user.password);
  });

  it('"LIST rotation-failures flags it as bind-account, with no secret"', async () => {
    await configure(s, facts, ou);
    await mountStorage(s).putJson('static-role/legacy', legacyRole('legacy', { username: 'engine', dn: ou.engine.dn.toUpperCase() }));
    const r = await s.request('LIST', 'ldap/rotation-failures');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.data.keys).toEqual(['legacy']);
    expect(r.body.data.key_info.legacy).toMatchObject({ kind: 'bind-account', last_error: expect.stringMatching(/binds as/) });
    expect(JSON.stringify(r.body)).not.toContain(ou.engine.password);
  });

  it('"a start reports each such role in a warning naming the mount and the role, with no secret"', async () => {
    const unsealKey = randomBytes(32).toString('base64');
    const dataDir = mkdtempSync(join(tmpdir(), 'strongroom-legacy-'));
    const first = await startTestServer({ storage: 'sqlite', unsealKey, dataDir });
    let node: NodeProcess | undefined;
    try {
      await configure(first, facts, ou);
      await mountStorage(first).putJson('static-role/legacy', legacyRole('legacy', { username: 'engine', dn: ou.engine.dn }));
      await first.close();
      node = await startNode(`sqlite:${join(dataDir, 'strongroom.db')}`, unsealKey);
      // The engine starts once the listener is open (docs/architecture.md, "Start-up"): its warning follows shortly.
      const started = node;
      await vi.waitFor(() => expect(started.logs.filter((l) => l.role === 'legacy')).not.toEqual([]), { timeout: 15_000, interval: 50 });
      const warnings = node.logs.filter((l) => l.role === 'legacy');
      expect(warnings).toEqual([expect.objectContaining({ mount: 'ldap/', msg: expect.stringMatching(/binds as/) })]);
      expect(JSON.stringify(node.logs)).not.toContain(ou.engine.password);
      expect((await node.request('GET', 'ldap/static-cred/legacy')).status).toBe(403);
    } finally {
      await node?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
