/**
 * The core's share of the security audit of 2026-11 (`shared/security/audit-2026-11.md`): each finding's
 * reproduction, then the class it stands for. Engine-specific findings live beside their engines' tests.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { backendTypes } from '../../src/engines.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';
import { field } from '../../src/core/fields.ts';
import { GuardError } from '../../src/core/storage/view.ts';
import { issueToken } from '../../src/core/token-issue.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';

const facts = inject('slapd');
const probes = new Map<string, TestBackendProbe>();
let s: TestServer;

/** An auth method that logs anyone in with the policies the request names: a role administrator's worst case. */
const anyPolicyAuth: BackendFactory = () => ({
  paths: [definePath({
    pattern: 'login',
    unauthenticated: true,
    description: 'Log in with the named policies.',
    fields: { policies: field.commaList('Policies for the token.') },
    operations: { update: async (req) => ({ auth: { policies: req.data.policies ?? [], displayName: 'x', metadata: {}, ttl: 3600, maxTtl: 0 } }) },
  })],
});

beforeAll(async () => {
  s = await startTestServer({
    listen: true,
    backends: { secret: { ...backendTypes.secret, test: testBackend(probes) }, auth: { ...backendTypes.auth, anypolicy: anyPolicyAuth } },
  });
  expect((await s.request('POST', 'sys/mounts/leased', { body: { type: 'test' } })).status).toBe(204);
  expect((await s.request('POST', 'sys/auth/any', { body: { type: 'anypolicy' } })).status).toBe(204);
});
afterAll(() => s.close());

const policy = async (name: string, text: string) => expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: text } })).status).toBe(204);
const tokenWith = async (...policies: string[]) => (await s.request('POST', 'auth/token/create', { body: { policies } })).body.auth.client_token as string;
const probe = () => probes.get('leased/')!;

describe('auth method logins (finding 1: no login can mint root)', () => {
  it.each([['root'], ['ROOT'], [' root '], ['default,root'], ['response-wrapping'], ['Response-Wrapping']])(
    '"an auth method cannot create a token with a reserved policy": %s',
    async (policies) => {
      const r = await s.request('POST', 'auth/any/login', { token: null, body: { policies } });
      expect(r.status, JSON.stringify(r.body)).toBe(403);
      expect(r.body.errors[0]).toMatch(/auth methods cannot create tokens with the "(root|response-wrapping)" policy/);
    },
  );

  it('"a login with ordinary policies still works"', async () => {
    const r = await s.request('POST', 'auth/any/login', { token: null, body: { policies: 'dev,ops' } });
    expect(r.status).toBe(200);
    expect(r.body.auth.policies).toEqual(['default', 'dev', 'ops']);
  });
});

describe('sys/mounts (finding 4: auth methods only through sys/auth, which needs sudo)', () => {
  it.each([['POST', { type: 'cloud' }], ['DELETE', undefined]])('"sys/mounts/auth/<x> cannot %s an auth method, even for a token with every sys/mounts capability"', async (method, body) => {
    await policy('engine-admin', 'path "sys/mounts/*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }');
    const t = await tokenWith('engine-admin');
    for (const path of ['auth/any', 'auth/evil', 'auth', 'auth/', '/auth/any', 'auth//any', 'auth%2Fany']) {
      const r = await s.request(method, `sys/mounts/${path}`, { token: t, body });
      expect([400, 403], `${method} sys/mounts/${path}: ${r.status} ${JSON.stringify(r.body)}`).toContain(r.status);
    }
    expect((await s.request('GET', 'sys/auth')).body.data).toHaveProperty('any/');
    expect((await s.request('GET', 'sys/auth')).body.data).not.toHaveProperty('evil/');
  });

  it('"tuning an auth mount through sys/mounts/auth/<x>/tune stays possible (as in Vault)"', async () => {
    expect((await s.request('POST', 'sys/mounts/auth/any/tune', { body: { default_lease_ttl: '1h' } })).status).toBe(204);
  });
});

describe('token_bound_cidrs (finding 5: checked on every use, not only at login)', () => {
  const call = (method: string, path: string, token: string, from: string) =>
    s.app.inject({ method: method as 'GET', url: `/v1/${path}`, remoteAddress: from, headers: { 'x-service-token': token } });

  it.each([
    ['203.0.113.9', 403], ['10.1.2.3', 200], ['::ffff:10.1.2.3', 200], ['10.255.255.255', 200], ['11.0.0.1', 403], ['::1', 403], ['fd00::1', 403],
  ])('"a token bound to 10.0.0.0/8 is refused outside it on every request": from %s → %i', async (from, status) => {
    const { token } = await issueToken(s.core, { policies: ['default'], path: 'auth/token/create', displayName: 'bound', ttl: 3600, parent: '', renewable: true, boundCidrs: ['10.0.0.0/8'] });
    expect((await call('GET', 'auth/token/lookup-self', token, from)).statusCode).toBe(status);
    expect((await call('POST', 'auth/token/renew-self', token, from)).statusCode).toBe(status);
    // Renewing it by value from elsewhere (with a token of one's own) is a use of it too.
    const renew = await s.app.inject({ method: 'POST', url: '/v1/auth/token/renew', remoteAddress: from, headers: { 'x-service-token': 'root' }, payload: { token } });
    expect(renew.statusCode).toBe(status);
  });

  it('"a token bound to an IPv6 block is refused from IPv4 and other IPv6 addresses"', async () => {
    const { token } = await issueToken(s.core, { policies: ['default'], path: 'auth/token/create', displayName: 'bound6', ttl: 3600, parent: '', renewable: true, boundCidrs: ['2001:db8::/32'] });
    expect((await call('GET', 'auth/token/lookup-self', token, '2001:db8::7')).statusCode).toBe(200);
    expect((await call('GET', 'auth/token/lookup-self', token, '2001:db9::7')).statusCode).toBe(403);
    expect((await call('GET', 'auth/token/lookup-self', token, '127.0.0.1')).statusCode).toBe(403);
  });
});

describe('denied_parameters and allowed_parameters (finding 14: list-typed fields compare per element)', () => {
  beforeAll(async () => {
    await policy('role-writer', [
      'path "auth/cloud/role/*" { capabilities = ["create", "update"] denied_parameters = { "token_policies" = ["admin", "ops-*"] } }',
      'path "ldap/library/*" { capabilities = ["create", "update"] allowed_parameters = { "service_account_names" = ["svc-*"] "*" = [] } }',
    ].join('\n'));
  });
  it.each([
    ['"admin"', 'admin'], ['["admin"]', ['admin']], ['"default,admin"', 'default,admin'], ['["default","admin"]', ['default', 'admin']],
    ['" admin "', ' admin '], ['"default, admin"', 'default, admin'], ['["ops-root"] (glob)', ['ops-root']], ['"x,ops-1"', 'x,ops-1'],
    ['"ADMIN" (stored lower-cased)', 'ADMIN'], ['["default","Admin"]', ['default', 'Admin']], ['"default,ADMIN "', 'default,ADMIN '], ['"Ops-X"', 'Ops-X'],
  ])('"a denied value is refused however the list is written": token_policies=%s', async (_label, value) => {
    const t = await tokenWith('role-writer');
    const r = await s.request('POST', 'auth/cloud/role/r1', { token: t, body: { token_policies: value, bound_service_principal_ids: 'x' } });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
  });

  it('"a list with no denied element passes the ACL"', async () => {
    const t = await tokenWith('role-writer');
    const r = await s.request('POST', 'auth/cloud/role/r1', { token: t, body: { token_policies: 'dev,qa', bound_service_principal_ids: 'x' } });
    expect(r.status, JSON.stringify(r.body)).not.toBe(403);
  });

  it.each([
    [['svc-a', 'svc-b'], false], ['svc-a,svc-b', false], [['svc-a', 'admin'], true], ['svc-a,admin', true], ['admin', true],
  ])('"every element must be allowed": service_account_names=%j refused=%s', async (value, refused) => {
    const t = await tokenWith('role-writer');
    const r = await s.request('POST', 'ldap/library/pool', { token: t, body: { service_account_names: value } });
    if (refused) expect(r.status, JSON.stringify(r.body)).toBe(403);
    else expect(r.status, JSON.stringify(r.body)).not.toBe(403);
  });
});

describe('GET on a list path (finding 13: listing needs list)', () => {
  it('"no endpoint of any mounted backend answers both read and list on one path, so read never lists"', () => {
    const both: string[] = [];
    for (const mount of s.core.mounts.all()) {
      for (const def of s.core.mountedBackend(mount.path)?.paths ?? []) {
        // sys/policy is Vault's legacy listing by read; it shows names only, and Vault answers it the same way.
        if (def.operations.read && def.operations.list && !(mount.path === 'sys/' && def.pattern === 'policy/?')) both.push(`${mount.path}${def.pattern}`);
      }
    }
    expect(both).toEqual([]);
  });

  it.each(['ldap/static-role/', 'ldap/role/', 'ldap/library/', 'cloud/roles/', 'auth/cloud/role/', 'sys/policies/acl/', 'sys/policies/password/', 'sys/leases/lookup/leased/'])(
    '"a read-only token cannot list %s"',
    async (path) => {
      const prefix = path.replace(/\/$/, '');
      await policy('reader', `path "${prefix}/*" { capabilities = ["read"] }\npath "${prefix}" { capabilities = ["read"] }\npath "${path}" { capabilities = ["read"] }`);
      const t = await tokenWith('reader');
      expect((await s.request('LIST', path, { token: t })).status).toBe(403);
      const r = await s.request('GET', path, { token: t });
      expect(r.body?.data?.keys, JSON.stringify(r.body)).toBeUndefined();
    },
  );
});

describe('token revocation (finding 3: atomic from the caller\'s view)', () => {
  it('"the moment a revocation starts, the token and its descendants are refused; nothing it creates meanwhile survives"', async () => {
    await policy('worker', 'path "leased/creds/*" { capabilities = ["read"] }\npath "auth/token/create" { capabilities = ["update"] }');
    const x = await tokenWith('worker');
    const child = (await s.request('POST', 'auth/token/create', { token: x, body: { policies: ['worker'] } })).body.auth.client_token;
    expect((await s.request('GET', 'leased/creds/held', { token: x })).status).toBe(200);
    let release!: () => void;
    probe().revokeGate = new Promise((r) => (release = r));
    const revoking = s.request('POST', 'auth/token/revoke', { body: { token: x } });
    for (let i = 0; i < 200 && probe().revoking === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect(probe().revoking).toBe(1);

    // During the revocation of its lease: X, its child and anything they would make are refused.
    expect((await s.request('GET', 'auth/token/lookup-self', { token: x })).status).toBe(403);
    expect((await s.request('GET', 'auth/token/lookup-self', { token: child })).status).toBe(403);
    expect((await s.request('POST', 'auth/token/create', { token: x, body: { policies: ['worker'] } })).status).toBe(403);
    expect((await s.request('POST', 'auth/token/create', { token: child, body: { policies: ['worker'] } })).status).toBe(403);
    expect((await s.request('GET', 'leased/creds/late', { token: x })).status).toBe(403);

    release();
    probe().revokeGate = undefined;
    expect((await revoking).status).toBe(204);
    expect((await s.request('GET', 'auth/token/lookup-self', { token: child })).status).toBe(403);
    expect(probe().revoked).toContain('held');
    expect((await s.request('LIST', 'sys/leases/lookup/leased/creds/late/')).status).toBe(404);
  });

  it('"a request that passed its token check before the mark cannot store a child or a lease after it"', async () => {
    const { entry } = await issueToken(s.core, { policies: ['worker'], path: 'auth/token/create', displayName: 'inflight', ttl: 3600, parent: '', renewable: true });
    // Both writes are prepared as a request would before the revocation begins, and land after its mark.
    const child = s.core.tokens.prepare({ policies: ['worker'], path: 'auth/token/create', displayName: 'late-child', ttl: 60, parent: entry.salted, renewable: true, meta: {}, numUses: 0, explicitMaxTtl: 0, period: 0, entityId: '', boundCidrs: [], mountAccessor: '', internal: {} });
    const now = s.core.clock.now();
    const lease = s.core.leases.prepare({ id: 'leased/creds/inflight/x', kind: 'secret', mountPath: 'leased/', secretType: 'test_secret', internal: { name: 'inflight' }, issueTime: now, expireTime: now + 60_000, ttl: 60, maxTtl: 0, renewable: true, tokenSalted: entry.salted });
    await s.core.tokens.markRevoking(entry);
    await expect(s.core.systemView.commit([child.write])).rejects.toBeInstanceOf(GuardError);
    await expect(s.core.systemView.commit([lease.write])).rejects.toBeInstanceOf(GuardError);
    await s.core.revokeTokenTree(entry.salted);
    expect(await s.core.tokens.lookupSalted(child.entry.salted)).toBeUndefined();
    expect(await s.core.leases.get('leased/creds/inflight/x')).toBeUndefined();
  });

  it('"disabling a mount refuses its requests from the start, and a lease prepared before cannot land after"', async () => {
    expect((await s.request('POST', 'sys/mounts/doomed', { body: { type: 'test' } })).status).toBe(204);
    expect((await s.request('GET', 'doomed/creds/one')).status).toBe(200);
    const now = s.core.clock.now();
    const late = s.core.leases.prepare({ id: 'doomed/creds/late/x', kind: 'secret', mountPath: 'doomed/', secretType: 'test_secret', internal: { name: 'late' }, issueTime: now, expireTime: now + 60_000, ttl: 60, maxTtl: 0, renewable: true, tokenSalted: '' });
    let release!: () => void;
    probes.get('doomed/')!.revokeGate = new Promise((r) => (release = r));
    const disabling = s.request('DELETE', 'sys/mounts/doomed');
    for (let i = 0; i < 200 && probes.get('doomed/')!.revoking === 0; i++) await new Promise((r) => setTimeout(r, 5));
    expect((await s.request('GET', 'doomed/creds/two')).status).toBe(503);
    await expect(s.core.systemView.commit([late.write])).rejects.toBeInstanceOf(GuardError);
    release();
    expect((await disabling).status).toBe(204);
    expect((await s.request('GET', 'sys/mounts')).body.data).not.toHaveProperty('doomed/');
    expect(await s.core.leases.get('doomed/creds/late/x')).toBeUndefined();
  });
});

describe('the audit\'s reproductions against slapd (finding 2 A, B, C)', () => {
  let ou: IsolatedOu;
  beforeAll(async () => {
    ou = await createIsolatedOu(facts, { users: ['alice'], serviceAccounts: 0 });
    await configure(s, facts, ou);
  });
  afterAll(async () => {
    await s.core.leases.idle();
    await ou.cleanup();
  });

  it('"A: a deny on ldap/static-cred/admin holds for Admin"', async () => {
    await ok(s, 'POST', 'ldap/static-role/admin', { username: 'alice', rotation_period: '24h' });
    await policy('ops', 'path "ldap/static-cred/*" { capabilities = ["read"] }\npath "ldap/static-cred/admin" { capabilities = ["deny"] }');
    const t = await tokenWith('ops');
    for (const name of ['admin', 'Admin', 'ADMIN']) expect((await s.request('GET', `ldap/static-cred/${name}`, { token: t })).status, name).toBe(403);
    expect((await cred(s, 'admin')).username).toBe('alice');
  });

  it('"B: a policy administrator cannot rewrite its own policy by spelling it POLICY-ADMIN or policy-admin%C2%A0"', async () => {
    const text = 'path "sys/policies/acl/*" { capabilities = ["create", "read", "update", "delete", "list"] }\npath "sys/policies/acl/policy-admin" { capabilities = ["deny"] }';
    await policy('policy-admin', text);
    const t = await tokenWith('policy-admin');
    const everything = { policy: 'path "*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }' };
    for (const name of ['policy-admin', 'POLICY-ADMIN', 'policy-admin%C2%A0']) {
      expect((await s.request('PUT', `sys/policies/acl/${name}`, { token: t, body: everything })).status, name).toBe(403);
    }
    expect((await s.request('GET', 'sys/policies/acl/policy-admin')).body.data.policy).toBe(text);
    expect((await s.request('GET', 'ldap/static-cred/admin', { token: t })).status).toBe(403);
  });

  it('"C: credentials issued as ldap/creds/DEV get a canonical lease id, and revoke-prefix ldap/creds/dev ends them"', async () => {
    await ok(s, 'POST', 'ldap/role/dev', {
      creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
      deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
    });
    const issued = [];
    for (const spelling of ['dev', 'DEV', 'Dev']) {
      const r = await s.request('GET', `ldap/creds/${spelling}`);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.lease_id).toMatch(/^ldap\/creds\/dev\/[A-Za-z0-9]+$/);
      issued.push(r.body);
    }
    expect((await s.request('PUT', 'sys/leases/revoke-prefix/ldap/creds/dev')).status).toBe(204);
    expect((await s.request('LIST', 'sys/leases/lookup/ldap/creds/')).status).toBe(404);
    for (const c of issued) {
      const bind = await promisify(execFile)('ldapwhoami', ['-x', '-H', facts.url, '-D', c.data.distinguished_names[0], '-w', c.data.password]).then(() => 'bound', () => 'refused');
      expect(bind).toBe('refused');
    }
  });

  it('"C, older data: a lease stored under a mixed-case id by an earlier version is reached by revoke-prefix in any case"', async () => {
    const now = s.core.clock.now();
    await s.core.leases.register({ id: 'leased/creds/OLD/abc', kind: 'secret', mountPath: 'leased/', secretType: 'test_secret', internal: { name: 'OLD' }, issueTime: now, expireTime: now + 3_600_000, ttl: 3600, maxTtl: 0, renewable: true, tokenSalted: '' });
    expect((await s.request('LIST', 'sys/leases/lookup/leased/creds/old/')).body.data.keys).toEqual(['abc']);
    expect((await s.request('PUT', 'sys/leases/revoke-prefix/leased/creds/old')).status).toBe(204);
    expect(await s.core.leases.get('leased/creds/OLD/abc')).toBeUndefined();
    expect(probe().revoked).toContain('OLD');
  });
});

describe('interrupted disables (a crash between the mark and the end)', () => {
  it('"a restart clears a disable mark the process did not live to finish, so the mount takes leases again"', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'strongroom-interrupted-'));
    const opts = { storage: 'sqlite' as const, dataDir, unsealKey: randomBytes(32).toString('base64'), backends: { secret: { ...backendTypes.secret, test: testBackend(new Map()) }, auth: backendTypes.auth } };
    try {
      const first = await startTestServer(opts);
      expect((await first.request('POST', 'sys/mounts/half', { body: { type: 'test' } })).status).toBe(204);
      // What a disable writes first, left behind as if the process had died right after.
      await first.core.systemView.put(`disabling/${encodeURIComponent('half/')}`, Buffer.alloc(0));
      expect((await first.request('GET', 'half/creds/a')).status).toBe(403);
      await first.close();
      const again = await startTestServer(opts);
      expect((await again.request('GET', 'half/creds/b')).status).toBe(200);
      await again.close();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe('the unknown-fields warning (an echo of the client\'s own input)', () => {
  it('"names at most 20 unknown fields, each cut at 64 characters, and counts the rest"', async () => {
    const body: Record<string, string> = { policy: 'path "x" { capabilities = ["read"] }' };
    for (let i = 0; i < 2000; i++) body[`unknown_${String(i).padStart(4, '0')}`] = 'v';
    body['k'.repeat(5000)] = 'v';
    const r = await s.request('PUT', 'sys/policies/acl/echo', { body });
    expect(r.status).toBe(200);
    const warning: string = r.body.warnings[0];
    expect(warning.length).toBeLessThan(1000);
    expect(warning).toMatch(/\(and 1981 more\)$/);
  });
});
