// Who read which credential, when, from where, with no credential in the clear (docs/audit.md): one file device
// while a client drives every mount of a full server (ldap/ against slapd, cloud/ and auth/cloud/ against the
// Azure emulator, auth/token/, sys/) through every kind of operation. Then the log is checked for both entries of
// every request, for every secret the run issued or sent (in any spelling JSON could give it), and for each
// secret's hash where it was written, which must be what sys/audit-hash answers.
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { auditDir, auditHash, entriesOf, readEntries, type AuditEntry } from '../support/audit.ts';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');
const ROOT = `hvs.${randomBytes(18).toString('base64url')}`;
const logs = auditDir();
const file = logs.file();

interface Call {
  method: string; path: string; operation: string; mountType: string; status: number; body: any;
  /** Its request and response entries, found in log order (a 204 carries no request id to look them up by). */
  entries: AuditEntry[];
}
const calls: Call[] = [];
/** Every credential the run sent or received, by what it is. */
const secrets: Record<string, string> = { 'root token': ROOT };
let full: FullServer;
let ou: IsolatedOu;
let entries: AuditEntry[];

async function call(method: string, path: string, operation: string, mountType: string, body?: unknown, token: string | null = ROOT): Promise<any> {
  const r = await full.server.request(method, path, { body, token });
  calls.push({ method, path, operation, mountType, status: r.status, body: r.body, entries: [] });
  return r.body;
}

/** Requests ran one at a time, so each call's entries are the next request entry for its path and that request's id. */
function pairEntries(): void {
  let cursor = 0;
  for (const c of calls) {
    while (cursor < entries.length && !(entries[cursor].type === 'request' && entries[cursor].request.path === c.path)) cursor++;
    if (cursor === entries.length) return;
    c.entries = entriesOf(entries, entries[cursor++].request.id);
  }
}

beforeAll(async () => {
  full = await startFullServer({ env: { STRONGROOM_DEV_ROOT_TOKEN: ROOT } });
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 2 });
  expect((await full.server.request('PUT', 'sys/audit/file', { body: { type: 'file', options: { file_path: file } }, token: ROOT })).status).toBe(204);

  // ldap/: config (bind password), static role and its credential, dynamic creds and their lease, a library loan.
  const config = ouConfig(facts, ou);
  secrets['LDAP bind password'] = config.bindpass as string;
  await call('POST', 'ldap/config', 'create', 'ldap', config);
  await call('GET', 'ldap/config', 'read', 'ldap');
  await call('POST', 'ldap/static-role/app', 'create', 'ldap', { username: ou.users[0].name, rotation_period: '24h' });
  await call('LIST', 'ldap/static-role/', 'list', 'ldap');
  const stat = await call('GET', 'ldap/static-cred/app', 'read', 'ldap');
  secrets['LDAP static password'] = stat.data.password;
  await call('POST', 'ldap/role/dyn', 'create', 'ldap', {
    creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: audit\nuserPassword: {{.Password}}\n`,
    deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`, default_ttl: '1h',
  });
  const dyn = await call('GET', 'ldap/creds/dyn', 'read', 'ldap');
  secrets['LDAP dynamic password'] = dyn.data.password;
  await call('PUT', 'sys/leases/renew', 'update', 'system', { lease_id: dyn.lease_id, increment: 600 });
  await call('PUT', 'sys/leases/revoke', 'update', 'system', { lease_id: dyn.lease_id });
  await call('POST', 'ldap/library/set', 'create', 'ldap', { service_account_names: ou.serviceAccounts.map((a) => a.name), ttl: '1h' });
  const loan = await call('POST', 'ldap/library/set/check-out', 'update', 'ldap', { ttl: '30m' });
  secrets['LDAP library password'] = loan.data.password;
  await call('POST', 'ldap/library/set/check-in', 'update', 'ldap', { service_account_names: [loan.data.service_account_name] });
  await call('DELETE', 'ldap/static-role/app', 'delete', 'ldap');

  // cloud/: config (the engine's client secret), dynamic credentials (a new client secret), lease revoke.
  const cloudConfig = full.cloudConfig();
  secrets['cloud config client secret'] = cloudConfig.client_secret as string;
  await call('POST', 'cloud/config', 'create', 'cloud', cloudConfig);
  await call('POST', 'cloud/roles/reader', 'create', 'cloud', { azure_roles: full.readerRoles(), ttl: '1h' });
  const creds = await call('GET', 'cloud/creds/reader', 'read', 'cloud');
  secrets['cloud dynamic client secret'] = creds.data.client_secret;
  await call('PUT', 'sys/leases/revoke', 'update', 'system', { lease_id: creds.lease_id });

  // auth/cloud/: a login with a workload's JWT (unauthenticated), then the token it got at work and refused.
  await call('PUT', 'sys/policies/acl/app', 'update', 'system', { policy: 'path "sys/mounts" { capabilities = ["read"] }' });
  await call('POST', 'auth/cloud/config', 'create', 'cloud', full.authConfig());
  await call('POST', 'auth/cloud/role/ci', 'create', 'cloud', { policies: ['app'], bound_service_principal_ids: [full.loginIdentity.principalId] });
  const jwt = await full.mintLoginJwt();
  secrets['login JWT'] = jwt;
  const login = await call('POST', 'auth/cloud/login', 'update', 'cloud', { role: 'ci', jwt }, null);
  secrets['login token'] = login.auth.client_token;
  await call('GET', 'sys/mounts', 'read', 'system', undefined, login.auth.client_token);
  await call('GET', 'auth/token/lookup-self', 'read', 'token', undefined, login.auth.client_token);
  await call('GET', 'ldap/config', 'read', 'ldap', undefined, login.auth.client_token);

  // auth/token/: a token made, looked up by value, revoked.
  const made = await call('POST', 'auth/token/create', 'update', 'token', { policies: ['app'], meta: { team: 'audit' } });
  secrets['created token'] = made.auth.client_token;
  await call('POST', 'auth/token/lookup', 'update', 'token', { token: made.auth.client_token });
  await call('POST', 'auth/token/revoke', 'update', 'token', { token: made.auth.client_token });
  entries = readEntries(file);
  pairEntries();
});
afterAll(async () => {
  await full?.server.core.leases.idle();
  await full?.close();
  await ou?.cleanup();
  logs.cleanup();
});

describe('entries for every mount', () => {
  it('"every request is on record twice": a request entry and a response entry with its operation, path and mount type, for read, list, write, delete, login and lease renew and revoke', () => {
    for (const c of calls) {
      const what = `${c.method} ${c.path} (${c.status})`;
      expect(c.entries.map((e) => e.type), what).toEqual(['request', 'response']);
      if (c.body?.request_id) expect(c.entries[0].request.id, what).toBe(c.body.request_id);
      for (const e of c.entries) expect(e.request, what).toMatchObject({ operation: c.operation, path: c.path, mount_type: c.mountType, remote_address: '127.0.0.1' });
    }
    const statuses = calls.map((c) => c.status);
    expect(statuses.filter((st) => st === 403), 'the login token is refused ldap/config').toHaveLength(1);
    expect(statuses.filter((st) => st >= 400)).toHaveLength(1);
    expect(new Set(calls.map((c) => c.operation))).toEqual(new Set(['read', 'list', 'create', 'update', 'delete']));
  });

  it('"a refused request says who was refused": the login token\'s entity, policies and hashed token, and the error', async () => {
    const refused = calls.find((c) => c.status === 403)!.entries;
    expect(refused.map((e) => e.error)).toEqual(['permission denied', 'permission denied']);
    expect(refused[0].auth).toMatchObject({
      client_token: await auditHash(full.server, 'file', secrets['login token'], ROOT), display_name: expect.stringMatching(/^cloud-/), policies: ['app', 'default'],
      entity_id: expect.stringMatching(/^[0-9a-f-]{36}$/), metadata: expect.objectContaining({ role: 'ci' }),
    });
  });
});

describe('no secret in the clear', () => {
  it('"no secret the run issued or sent appears in the log": LDAP bind, static, dynamic and library passwords, the cloud client secrets, the login JWT, the tokens and the root token', () => {
    const text = readFileSync(file, 'utf8');
    expect(Object.keys(secrets)).toHaveLength(10);
    for (const [what, value] of Object.entries(secrets)) {
      expect(value, what).toMatch(/.{16}/);
      // As written, and as JSON would escape it.
      expect(text.includes(value), what).toBe(false);
      expect(text.includes(JSON.stringify(value).slice(1, -1)), what).toBe(false);
    }
  });

  it('"each secret is written as its hmac-sha256, the value sys/audit-hash gives", in lists, nested objects and auth blocks too', async () => {
    const hash = (v: string) => auditHash(full.server, 'file', v, ROOT);
    const at = (path: string, type: 'request' | 'response', status = 200) => calls.find((c) => c.path === path && c.status === status)!.entries.find((e) => e.type === type)!;
    expect(at('ldap/config', 'request', 204).request.data!.bindpass).toBe(await hash(secrets['LDAP bind password']));
    expect(at('ldap/static-cred/app', 'response').response!.data!.password).toBe(await hash(secrets['LDAP static password']));
    const dyn = at('ldap/creds/dyn', 'response');
    expect(dyn.response!.data!.password).toBe(await hash(secrets['LDAP dynamic password']));
    const dn = calls.find((c) => c.path === 'ldap/creds/dyn')!.body.data.distinguished_names[0];
    expect(dyn.response!.data!.distinguished_names, 'a list').toEqual([await hash(dn)]);
    expect(dyn.response!.secret!.lease_id, 'lease ids are kept, to follow a lease').toBe(calls.find((c) => c.path === 'ldap/creds/dyn')!.body.lease_id);
    expect(at('ldap/library/set/check-out', 'response').response!.data!.password).toBe(await hash(secrets['LDAP library password']));
    expect(at('cloud/config', 'request', 204).request.data!.client_secret).toBe(await hash(secrets['cloud config client secret']));
    expect(at('cloud/creds/reader', 'response').response!.data!.client_secret).toBe(await hash(secrets['cloud dynamic client secret']));
    const login = at('auth/cloud/login', 'response');
    expect(login.request.data!.jwt).toBe(await hash(secrets['login JWT']));
    expect(login.auth, 'the login itself is unauthenticated').toEqual({});
    const issued = calls.find((c) => c.path === 'auth/cloud/login')!.body.auth;
    expect(login.response!.auth, 'the auth block of a login response').toMatchObject({
      client_token: await hash(secrets['login token']), accessor: await hash(issued.accessor), policies: ['app', 'default'], token_type: 'service',
    });
    const lookup = at('auth/token/lookup-self', 'response');
    expect(lookup.response!.data!.id, 'a token in response data').toBe(await hash(secrets['login token']));
    expect(at('auth/token/create', 'request').request.data!.meta, 'a nested object').toEqual({ team: await hash('audit') });
    expect(at('auth/token/create', 'response').response!.auth!.client_token).toBe(await hash(secrets['created token']));
    expect(at('auth/token/lookup', 'request').request.data!.token).toBe(await hash(secrets['created token']));
    expect(at('sys/mounts', 'request').request.client_token).toBe(await hash(secrets['login token']));
    expect(at('ldap/config', 'request').auth.client_token).toBe(await hash(ROOT));
  });
});
