/**
 * Canonical before authorised (security audit 2026-11, finding 2, and the class it stands for): every name the
 * server normalises is normalised before the ACL check, so a deny on X holds for every spelling of X. One
 * table-driven matrix: one policy of "everything under a prefix except one name" per endpoint, and every
 * spelling of that name and of an allowed one, on every capability the endpoint has.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { backendTypes } from '../../src/engines.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const facts = inject('slapd');
let s: TestServer;
let token: string;
let ou: IsolatedOu;
let adminPassword: string;
const probes = new Map<string, TestBackendProbe>();

/** An endpoint naming an object: `at(name)` is its path with that (already encoded) spelling of the name. */
interface Target {
  label: string;
  at: (name: string) => string;
  methods: string[];
  /** Whether the name is case-insensitive here (mount paths are not: `LDAP2` is another mount). */
  folds: boolean;
  /** Whether trailing Unicode white space is trimmed from the name (policy names are). */
  trims?: boolean;
}

const targets: Target[] = [
  { label: 'ldap static role', at: (n) => `ldap/static-role/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: true },
  { label: 'ldap static creds', at: (n) => `ldap/static-cred/${n}`, methods: ['GET'], folds: true },
  { label: 'ldap rotate-role', at: (n) => `ldap/rotate-role/${n}`, methods: ['POST'], folds: true },
  { label: 'ldap dynamic role', at: (n) => `ldap/role/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: true },
  { label: 'ldap dynamic creds', at: (n) => `ldap/creds/${n}`, methods: ['GET'], folds: true },
  { label: 'ldap library set', at: (n) => `ldap/library/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: true },
  { label: 'ldap library check-out', at: (n) => `ldap/library/${n}/check-out`, methods: ['POST'], folds: true },
  { label: 'ldap library check-in', at: (n) => `ldap/library/${n}/check-in`, methods: ['POST'], folds: true },
  { label: 'ldap library manage check-in', at: (n) => `ldap/library/manage/${n}/check-in`, methods: ['POST'], folds: true },
  { label: 'ldap library status', at: (n) => `ldap/library/${n}/status`, methods: ['GET'], folds: true },
  { label: 'cloud role', at: (n) => `cloud/roles/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: true },
  { label: 'cloud creds', at: (n) => `cloud/creds/${n}`, methods: ['GET'], folds: true },
  { label: 'cloud auth role', at: (n) => `auth/cloud/role/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: true },
  { label: 'ACL policy', at: (n) => `sys/policies/acl/${n}`, methods: ['GET', 'PUT', 'DELETE'], folds: true, trims: true },
  { label: 'ACL policy (legacy path)', at: (n) => `sys/policy/${n}`, methods: ['GET', 'PUT', 'DELETE'], folds: true, trims: true },
  { label: 'password policy', at: (n) => `sys/policies/password/${n}`, methods: ['GET', 'PUT', 'DELETE'], folds: true, trims: true },
  { label: 'password policy generate', at: (n) => `sys/policies/password/${n}/generate`, methods: ['GET'], folds: true, trims: true },
  { label: 'lease revoke-prefix', at: (n) => `sys/leases/revoke-prefix/leased/creds/${n}`, methods: ['PUT'], folds: true },
  { label: 'lease revoke-force', at: (n) => `sys/leases/revoke-force/leased/creds/${n}`, methods: ['PUT'], folds: true },
  { label: 'secrets engine mount', at: (n) => `sys/mounts/${n}`, methods: ['GET', 'POST', 'DELETE'], folds: false },
  { label: 'secrets engine tune', at: (n) => `sys/mounts/${n}/tune`, methods: ['GET', 'POST'], folds: false },
  { label: 'auth method mount', at: (n) => `sys/auth/${n}`, methods: ['POST', 'DELETE'], folds: false },
];

const DENIED = 'admin';
const ALLOWED = 'other';
const DENIED_POLICY = 'path "secret/*" { capabilities = ["read"] }';
const DENIED_PASSWORD_POLICY = 'length = 20\nrule "charset" {\n  charset = "abcdefghij0123456789"\n}';

/**
 * Spellings of a name. `same` says whether the server must treat it as the name itself (then a deny on the name
 * must answer 403); the others must never reach the object at all (the router refuses them).
 */
const spellings: Array<{ label: string; spell: (n: string) => string; same: (t: Target) => boolean }> = [
  { label: 'as is', spell: (n) => n, same: () => true },
  { label: 'capitalised', spell: (n) => n[0]!.toUpperCase() + n.slice(1), same: (t) => t.folds },
  { label: 'upper case', spell: (n) => n.toUpperCase(), same: (t) => t.folds },
  { label: 'mixed case', spell: (n) => [...n].map((c, i) => (i % 2 ? c.toUpperCase() : c)).join(''), same: (t) => t.folds },
  { label: 'percent-encoded letters', spell: (n) => [...n].map((c) => `%${c.charCodeAt(0).toString(16)}`).join(''), same: () => true },
  { label: 'trailing %C2%A0 (no-break space)', spell: (n) => `${n}%C2%A0`, same: (t) => t.trims === true },
  { label: 'trailing %E2%80%83 (em space)', spell: (n) => `${n}%E2%80%83`, same: (t) => t.trims === true },
  { label: 'upper case + trailing %C2%A0', spell: (n) => `${n.toUpperCase()}%C2%A0`, same: (t) => t.trims === true },
  { label: 'trailing %2e', spell: (n) => `${n}%2e`, same: () => false },
  { label: 'a %2e%2e segment', spell: (n) => `x/%2e%2e/${n}`, same: () => false },
  { label: 'doubled slash before', spell: (n) => `/${n}`, same: (t) => !t.folds },
  { label: 'trailing slash', spell: (n) => `${n}/`, same: (t) => !t.folds },
  { label: 'trailing %2F', spell: (n) => `${n}%2F`, same: (t) => !t.folds },
  { label: 'zero-width space inside', spell: (n) => `${n.slice(0, 2)}%E2%80%8B${n.slice(2)}`, same: () => false },
];

/**
 * Sends the path exactly as spelled over a real socket: URL parsers (fetch, inject) resolve `%2e%2e` and
 * would hide the very spellings under test.
 */
function raw(method: string, path: string, tok: string): Promise<{ status: number; body: any }> {
  const { hostname, port } = new URL(s.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path: `/v1/${path}`, headers: { 'x-service-token': tok } }, (res) => {
      let text = '';
      res.setEncoding('utf8').on('data', (c: string) => (text += c)).on('end', () => {
        let body: unknown = text;
        try {
          body = text ? JSON.parse(text) : undefined;
        } catch { /* not JSON: keep the text */ }
        resolve({ status: res.statusCode ?? 0, body });
      });
    });
    req.on('error', reject).end();
  });
}

beforeAll(async () => {
  s = await startTestServer({ listen: true, backends: { secret: { ...backendTypes.secret, test: testBackend(probes) }, auth: backendTypes.auth } });
  expect((await s.request('POST', 'sys/mounts/leased', { body: { type: 'test' } })).status).toBe(204);
  for (const name of [DENIED, ALLOWED]) {
    expect((await s.request('POST', `sys/mounts/${name}`, { body: { type: 'test' } })).status).toBe(204);
  }
  expect((await s.request('PUT', `sys/policies/acl/${DENIED}`, { body: { policy: DENIED_POLICY } })).status).toBe(204);
  // Real objects behind the denied name, so "never read" and "never changed" mean something.
  ou = await createIsolatedOu(facts, { users: [DENIED], serviceAccounts: 1 });
  await configure(s, facts, ou);
  await ok(s, 'POST', `ldap/static-role/${DENIED}`, { username: DENIED, rotation_period: '24h' });
  adminPassword = (await cred(s, DENIED)).password;
  await ok(s, 'POST', `ldap/role/${DENIED}`, {
    creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
    deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
  });
  await ok(s, 'POST', `ldap/library/${DENIED}`, { service_account_names: [ou.serviceAccounts[0]!.name] });
  expect((await s.request('PUT', `sys/policies/password/${DENIED}`, { body: { policy: DENIED_PASSWORD_POLICY } })).status).toBe(204);
  // "Everything under each prefix, except the one name": the policy shape the audit found void.
  const rules = targets.flatMap((t) => {
    const base = t.at('\u0000').split('\u0000')[0]!;
    return [
      `path "${base}*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }`,
      `path "${t.at(DENIED)}" { capabilities = ["deny"] }`,
    ];
  });
  expect((await s.request('PUT', 'sys/policies/acl/all-but-admin', { body: { policy: rules.join('\n') } })).status).toBe(204);
  token = (await s.request('POST', 'auth/token/create', { body: { policies: ['all-but-admin'] } })).body.auth.client_token;
});
afterAll(async () => {
  await s.close();
  await ou?.cleanup();
});

describe('canonical before authorised: the ACL matrix (policies × paths × spellings × capabilities)', () => {
  const cells = targets.flatMap((t) => t.methods.flatMap((method) => spellings.map((sp) => ({ t, method, sp }))));

  it.each(cells)('"a deny on $t.label holds for every spelling": $method, $sp.label', async ({ t, method, sp }) => {
    const denied = await raw(method, t.at(sp.spell(DENIED)), token);
    const allowed = await raw(method, t.at(sp.spell(ALLOWED)), token);
    const shown = (r: { status: number; body: any }) => `${r.status} ${JSON.stringify(r.body)}`;
    if (sp.same(t)) {
      expect(denied.status, `denied name: ${shown(denied)}`).toBe(403);
      // The same spelling of an allowed name gets through the ACL: the 403 above is the deny, not the spelling.
      expect(allowed.status, `allowed name: ${shown(allowed)}`).not.toBe(403);
      expect(allowed.status).toBeLessThan(500);
    } else {
      // Not a spelling of the name: the router refuses it, or it names another object (`admin.` is a name of its
      // own). Either way the denied object is never read here, and the last test shows it was never changed.
      for (const r of [denied, allowed]) {
        expect(r.status, shown(r)).toBeLessThan(500);
        if (method === 'GET') expect(r.status, shown(r)).not.toBe(200);
      }
    }
  });

  it('"after every spelling of every method, the denied objects are untouched"', async () => {
    expect((await s.request('GET', `ldap/static-cred/${DENIED}`)).body.data.password).toBe(adminPassword);
    expect((await s.request('GET', `ldap/role/${DENIED}`)).status).toBe(200);
    expect((await s.request('GET', `ldap/library/${DENIED}/status`)).body.data).toHaveProperty(ou.serviceAccounts[0]!.name);
    expect((await s.request('GET', `sys/policies/acl/${DENIED}`)).body.data.policy).toBe(DENIED_POLICY);
    expect((await s.request('GET', `sys/policies/password/${DENIED}`)).body.data.policy).toBe(DENIED_PASSWORD_POLICY);
    expect((await s.request('GET', 'sys/mounts')).body.data).toHaveProperty(`${DENIED}/`);
  });

  it('"LIST on a denied prefix holds for every case spelling of it"', async () => {
    const policy = 'path "ldap/role/*" { capabilities = ["list", "read"] }\npath "ldap/role/team/" { capabilities = ["deny"] }';
    expect((await s.request('PUT', 'sys/policies/acl/list-but-team', { body: { policy } })).status).toBe(204);
    const t = (await s.request('POST', 'auth/token/create', { body: { policies: ['list-but-team'] } })).body.auth.client_token;
    for (const spelling of ['team', 'Team', 'TEAM', 'tEaM']) {
      expect((await s.request('LIST', `ldap/role/${spelling}/`, { token: t })).status, spelling).toBe(403);
    }
    expect((await s.request('LIST', 'ldap/role/others/', { token: t })).status).toBe(404);
  });
});

describe('names stored and answered in their canonical spelling', () => {
  it('"a policy written as POLICY-ADMIN%C2%A0 is stored as policy-admin, and the deny on it holds"', async () => {
    const policy = 'path "sys/policies/acl/*" { capabilities = ["create", "read", "update", "delete", "list"] }\npath "sys/policies/acl/policy-admin" { capabilities = ["deny"] }';
    expect((await s.request('PUT', 'sys/policies/acl/policy-admin', { body: { policy } })).status).toBe(204);
    const t = (await s.request('POST', 'auth/token/create', { body: { policies: ['policy-admin'] } })).body.auth.client_token;
    const everything = 'path "*" { capabilities = ["create", "read", "update", "delete", "list", "sudo"] }';
    for (const spelling of ['policy-admin', 'POLICY-ADMIN', 'Policy-Admin', 'policy-admin%C2%A0', 'POLICY-ADMIN%E2%80%83', '%70olicy-admin']) {
      expect((await s.request('PUT', `sys/policies/acl/${spelling}`, { token: t, body: { policy: everything } })).status, spelling).toBe(403);
    }
    expect((await s.request('GET', 'sys/policies/acl/policy-admin')).body.data.policy).toBe(policy);
    expect((await s.request('LIST', 'auth/token/accessors', { token: t })).status).toBe(403);
  });
});
