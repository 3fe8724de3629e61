/**
 * Aliases are judged as what they become (security audit 2026-11-28, N1, and the case bypass of a library set's
 * service_account_names): every deprecated or Vault name of a field is folded into the field before the ACL's
 * parameter rules run, a rule on either name is a rule on the field, and a denied value is denied in every spelling
 * the handler treats as the same. One table of every alias on every mount that has one, crossed with the rule kinds
 * (denied on the field, denied on the alias, allowed, required) and the hostile ways of writing the request (alias
 * only, both names, list or comma string, case).
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { configure } from '../support/ldap-engine.ts';
import { canBind, createIsolatedOu, type SeededAccount } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;

beforeAll(async () => {
  // The default mounts (cloud/, ldap/, auth/cloud/), unconfigured: the ACL decides before any handler needs a directory.
  s = await startTestServer();
});
afterAll(async () => {
  await s?.close();
});

let serial = 0;
/** A token whose only policy is this one rule on `path` (plus what the endpoint needs to run). */
async function tokenFor(path: string, rule: string): Promise<string> {
  const name = `p${++serial}`;
  const text = `path "${path}" {\n capabilities = ["create", "update", "read"]\n ${rule}\n}`;
  expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: text } })).status).toBe(204);
  const r = await s.request('POST', 'auth/token/create', { body: { policies: [name], no_default_policy: true } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.auth.client_token as string;
}

/** One alias on one endpoint: a value a rule denies, the hostile ways of writing it, and a value nobody denies. */
interface Alias {
  endpoint: string;
  /** A request path on it (a fresh name per request, so nothing stored earlier interferes). */
  at: () => string;
  /** The policy path that covers it. */
  acl: string;
  field: string;
  alias: string;
  /** What every request must carry to be a complete write, apart from the field under test. */
  base?: Record<string, unknown>;
  denied: unknown;
  /** The denied value as the rule lists it (the request's spelling may differ). */
  rule: string;
  /** Other spellings of the denied value the handler takes as the same. */
  spellings: unknown[];
  harmless: unknown;
  /** A valid value other than `denied`, for the both-names case. */
  other: unknown;
  /** How the stored effect is read back, where the endpoint can store without an outside system. */
  stored?: (path: string) => Promise<unknown>;
}

const SP = '11111111-1111-1111-1111-111111111111';
let n = 0;
const fresh = (prefix: string) => () => `${prefix}${++n}`;
const readData = async (path: string) => (await s.request('GET', path)).body?.data;
const cloudRoles = (role: string) => JSON.stringify([{ role_name: role, scope: '/subscriptions/00000000-0000-0000-0000-000000000000' }]);

const ALIASES: Alias[] = [
  {
    endpoint: 'auth/cloud/role/:name', at: fresh('auth/cloud/role/r'), acl: 'auth/cloud/role/*', other: 'dev', field: 'token_policies', alias: 'policies', base: { bound_service_principal_ids: SP },
    denied: 'admin', rule: '"admin", "ops-*"', spellings: ['ADMIN', ['default', 'Admin'], 'default, admin ', ['ops-prod'], 'x,OPS-1'], harmless: 'dev',
    stored: async (p) => (await readData(p))?.token_policies,
  },
  ...([['ttl', 'token_ttl', '1h', '2h'], ['max_ttl', 'token_max_ttl', '2h', '3h'], ['period', 'token_period', '720h', '1h'], ['num_uses', 'token_num_uses', 5, 6]] as const).map(([alias, field, value, other]): Alias => ({
    endpoint: 'auth/cloud/role/:name', at: fresh(`auth/cloud/role/${alias}`), acl: 'auth/cloud/role/*', other, field, alias, base: { bound_service_principal_ids: SP },
    denied: value, rule: '', spellings: [String(value)], harmless: undefined, stored: async (p) => (await readData(p))?.[field],
  })),
  {
    endpoint: 'auth/cloud/role/:name', at: fresh('auth/cloud/role/c'), acl: 'auth/cloud/role/*', other: '10.0.0.0/8', field: 'token_bound_cidrs', alias: 'bound_cidrs', base: { bound_service_principal_ids: SP },
    denied: '0.0.0.0/0', rule: '"0.0.0.0/0"', spellings: [['0.0.0.0/0'], '10.0.0.0/8, 0.0.0.0/0', [' 0.0.0.0/0 ']], harmless: '10.0.0.0/8',
    stored: async (p) => (await readData(p))?.token_bound_cidrs,
  },
  {
    endpoint: 'auth/token/roles/:name', at: fresh('auth/token/roles/p'), acl: 'auth/token/roles/*', other: '1h', field: 'token_period', alias: 'period',
    denied: '720h', rule: '', spellings: [2592000], harmless: undefined, stored: async (p) => (await readData(p))?.token_period,
  },
  {
    endpoint: 'auth/token/roles/:name', at: fresh('auth/token/roles/e'), acl: 'auth/token/roles/*', other: '1h', field: 'token_explicit_max_ttl', alias: 'explicit_max_ttl',
    denied: '720h', rule: '', spellings: ['2592000'], harmless: undefined, stored: async (p) => (await readData(p))?.token_explicit_max_ttl,
  },
  {
    endpoint: 'auth/token/roles/:name', at: fresh('auth/token/roles/b'), acl: 'auth/token/roles/*', other: '192.0.2.0/24', field: 'token_bound_cidrs', alias: 'bound_cidrs',
    denied: '0.0.0.0/0', rule: '"0.0.0.0/0"', spellings: [['0.0.0.0/0'], '192.0.2.0/24,0.0.0.0/0'], harmless: '192.0.2.0/24',
    stored: async (p) => (await readData(p))?.token_bound_cidrs,
  },
  {
    endpoint: 'auth/token/create', at: () => 'auth/token/create', acl: 'auth/token/create', other: '1h', field: 'ttl', alias: 'lease',
    denied: '768h', rule: '', spellings: [2764800], harmless: undefined,
  },
  {
    endpoint: 'cloud/roles/:name', at: fresh('cloud/roles/r'), acl: 'cloud/roles/*', other: cloudRoles('Reader'), field: 'cloud_roles', alias: 'azure_roles',
    denied: cloudRoles('Owner'), rule: '"*Owner*", "*Contributor*"', spellings: [cloudRoles('OWNER'), cloudRoles('contributor'), cloudRoles('Owner').replace('Owner', '\\u004fwner')], harmless: cloudRoles('Reader'),
  },
  {
    endpoint: 'cloud/roles/:name', at: fresh('cloud/roles/g'), acl: 'cloud/roles/*', other: JSON.stringify([{ group_name: 'readers' }]), field: 'cloud_groups', alias: 'azure_groups', base: { cloud_roles: cloudRoles('Reader') },
    denied: JSON.stringify([{ group_name: 'admins' }]), rule: '"*admins*"', spellings: [JSON.stringify([{ group_name: 'Admins' }]), '[{"group_name": "\\u0061dmins"}]'], harmless: JSON.stringify([{ group_name: 'readers' }]),
  },
  {
    endpoint: 'sys/policy/:name', at: fresh('sys/policy/legacy'), acl: 'sys/policy/*', other: 'path "x/*" { capabilities = ["read"] }', field: 'policy', alias: 'rules',
    denied: 'path "sys/*" { capabilities = ["sudo"] }', rule: '', spellings: [], harmless: undefined,
  },
  {
    endpoint: 'sys/capabilities-self', at: () => 'sys/capabilities-self', acl: 'sys/capabilities-self', other: 'secret/x', field: 'paths', alias: 'path',
    denied: 'sys/seal', rule: '"sys/seal"', spellings: [['sys/seal'], 'x, sys/seal'], harmless: 'secret/x',
  },
];

const send = (a: Alias, path: string, token: string, body: Record<string, unknown>) => s.request('POST', path, { token, body: { ...a.base, ...body } });

/** 403 and, where the endpoint stores, nothing stored. */
async function refused(a: Alias, path: string, token: string, body: Record<string, unknown>): Promise<void> {
  const r = await send(a, path, token, body);
  expect(r.status, `${a.endpoint} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`).toBe(403);
  if (a.stored) expect(await a.stored(path)).toBeUndefined();
}

async function passes(a: Alias, path: string, token: string, body: Record<string, unknown>): Promise<void> {
  const r = await send(a, path, token, body);
  expect(r.status, `${a.endpoint} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`).not.toBe(403);
}

const label = (a: Alias) => `${a.endpoint} ${a.alias} -> ${a.field}`;
const cases = ALIASES.map((a) => [label(a), a] as const);
const deniedRule = (a: Alias, name: string) => `denied_parameters = { "${name}" = [${a.rule}] }`;

describe('denied_parameters on the field', () => {
  it.each(cases)('"the alias alone is judged as the field": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, deniedRule(a, a.field));
    await refused(a, a.at(), t, { [a.field]: a.denied });
    await refused(a, a.at(), t, { [a.alias]: a.denied });
  });

  it.each(cases.filter(([, a]) => a.spellings.length > 0))('"every spelling of a denied value is denied, under either name": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, deniedRule(a, a.field));
    for (const v of a.spellings) {
      await refused(a, a.at(), t, { [a.alias]: v });
      await refused(a, a.at(), t, { [a.field]: v });
    }
  });

  it.each(cases)('"both names with the same value are judged once, as the field": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, deniedRule(a, a.field));
    await refused(a, a.at(), t, { [a.alias]: a.denied, [a.field]: a.denied });
  });

  it.each(cases.filter(([, a]) => a.harmless !== undefined))('"a value no rule denies passes under either name": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, deniedRule(a, a.field));
    await passes(a, a.at(), t, { [a.alias]: a.harmless });
    await passes(a, a.at(), t, { [a.field]: a.harmless });
  });
});

describe('denied_parameters on the alias', () => {
  it.each(cases)('"a rule on the old name is a rule on the field": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, deniedRule(a, a.alias));
    await refused(a, a.at(), t, { [a.field]: a.denied });
    await refused(a, a.at(), t, { [a.alias]: a.denied });
  });
});

describe('both names with different values', () => {
  it.each(cases)('"are a 400 naming both, whatever the ACL would say of each": %s', async (_l, a) => {
    const path = a.at();
    const r = await s.request('POST', path, { body: { ...a.base, [a.alias]: a.denied, [a.field]: a.other } });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors[0]).toContain(`"${a.alias}"`);
    expect(r.body.errors[0]).toContain(`"${a.field}"`);
    if (a.stored) expect(await a.stored(path)).toBeUndefined();
  });
});

describe('allowed_parameters', () => {
  it.each(cases.filter(([, a]) => a.harmless !== undefined))('"an allowed list on the field bounds the alias too": %s', async (_l, a) => {
    const t = await tokenFor(a.acl, `allowed_parameters = { "${a.field}" = [${JSON.stringify(a.harmless)}] "*" = [] }`);
    await refused(a, a.at(), t, { [a.alias]: a.denied });
    await passes(a, a.at(), t, { [a.alias]: a.harmless });
  });

  it.each(cases)('"a field not allowed is not allowed under its old name": %s', async (_l, a) => {
    const base = Object.keys(a.base ?? {}).map((k) => `"${k}" = []`).join(' ');
    const t = await tokenFor(a.acl, `allowed_parameters = { "unrelated" = [] ${base} }`);
    await refused(a, a.at(), t, { [a.alias]: a.denied });
  });
});

describe('required_parameters', () => {
  it.each(cases)('"a required field is present when sent under its old name, and a required old name when the field is sent": %s', async (_l, a) => {
    const onField = await tokenFor(a.acl, `required_parameters = ["${a.field}"]`);
    await passes(a, a.at(), onField, { [a.alias]: a.denied });
    const onAlias = await tokenFor(a.acl, `required_parameters = ["${a.alias}"]`);
    await passes(a, a.at(), onAlias, { [a.field]: a.denied });
    await refused(a, a.at(), onAlias, { unrelated: 'x' });
  });
});

describe('values the handler identifies without regard to spelling', () => {
  /** A field whose values the handler compares in a canonical form, on an endpoint without an alias. */
  const CANONICAL: Array<{ label: string; path: string; acl: string; field: string; rule: string; spellings: unknown[]; base?: Record<string, unknown> }> = [
    {
      label: 'ldap library set service_account_names (the directory matches names without case)', path: 'ldap/library/pool', acl: 'ldap/library/*',
      field: 'service_account_names', rule: '"svc-admin"', spellings: ['SVC-ADMIN', ['Svc-Admin'], 'svc-a,Svc-Admin', [' sVc-AdMiN ']],
    },
    {
      label: 'ldap library check-in service_account_names', path: 'ldap/library/manage/pool/check-in', acl: 'ldap/library/manage/*',
      field: 'service_account_names', rule: '"svc-admin"', spellings: ['SVC-ADMIN', ['x', 'Svc-Admin']],
    },
    {
      label: 'ldap static role username', path: 'ldap/static-role/app', acl: 'ldap/static-role/*', field: 'username', rule: '"admin"',
      spellings: ['ADMIN', 'Admin'], base: { rotation_period: '1h' },
    },
    {
      label: 'ldap static role dn (compared as the directory compares DNs)', path: 'ldap/static-role/app', acl: 'ldap/static-role/*', field: 'dn',
      rule: '"cn=admin,dc=example,dc=org"', spellings: ['CN=Admin,DC=example,DC=org', 'cn = admin , dc=example, dc=org', 'commonName=admin,dc=example,dc=org'],
      base: { username: 'x', rotation_period: '1h' },
    },
    {
      label: 'cloud auth role bound_service_principal_ids (compared without case at login)', path: 'auth/cloud/role/b', acl: 'auth/cloud/role/*',
      field: 'bound_service_principal_ids', rule: `"${SP.replace(/1/g, 'a')}"`, spellings: [SP.replace(/1/g, 'A'), `${SP},${SP.replace(/1/g, 'A')}`],
    },
    {
      label: 'cloud role application_object_id (an object id, compared without case)', path: 'cloud/roles/app', acl: 'cloud/roles/*',
      field: 'application_object_id', rule: `"${SP.replace(/1/g, 'b')}"`, spellings: [SP.replace(/1/g, 'B')],
    },
  ];

  it.each(CANONICAL.map((c) => [c.label, c] as const))('"a denied value is denied in every spelling that names the same thing": %s', async (_l, c) => {
    const t = await tokenFor(c.acl, `denied_parameters = { "${c.field}" = [${c.rule}] }`);
    for (const v of c.spellings) {
      const r = await s.request('POST', c.path, { token: t, body: { ...c.base, [c.field]: v } });
      expect(r.status, `${JSON.stringify(v)}: ${JSON.stringify(r.body)}`).toBe(403);
    }
  });

  it('"a rule written in another case still denies: the rule\'s values are read as the handler reads the request\'s"', async () => {
    const t = await tokenFor('ldap/library/*', 'denied_parameters = { "service_account_names" = ["Svc-Admin"] }');
    for (const v of ['svc-admin', 'SVC-ADMIN', ['x', 'svc-admin']]) {
      expect((await s.request('POST', 'ldap/library/pool', { token: t, body: { service_account_names: v } })).status).toBe(403);
    }
    const p = await tokenFor('auth/cloud/role/*', 'denied_parameters = { "policies" = ["Admin"] }');
    expect((await s.request('POST', 'auth/cloud/role/x', { token: p, body: { token_policies: 'admin', bound_service_principal_ids: SP } })).status).toBe(403);
  });

  it('"an allowed account name passes only as written (fail closed where the directory may tell cases apart)"', async () => {
    const t = await tokenFor('ldap/library/*', 'allowed_parameters = { "service_account_names" = ["svc-a"] }');
    expect((await s.request('POST', 'ldap/library/pool', { token: t, body: { service_account_names: 'svc-a' } })).status).not.toBe(403);
    expect((await s.request('POST', 'ldap/library/pool', { token: t, body: { service_account_names: 'SVC-A' } })).status).toBe(403);
  });

  it('"an allowed policy name passes in any spelling the server stores as it" (policy names are always lower-cased)', async () => {
    const t = await tokenFor('auth/cloud/role/*', 'allowed_parameters = { "token_policies" = ["Dev"] "bound_service_principal_ids" = [] }');
    expect((await s.request('POST', 'auth/cloud/role/y', { token: t, body: { policies: 'DEV', bound_service_principal_ids: SP } })).status).toBe(204);
    expect((await readData('auth/cloud/role/y')).token_policies).toEqual(['dev']);
  });
});

describe('ldap/library/:set_name against slapd', () => {
  const facts = inject('slapd');

  it('"a denied account in another case is refused before the directory is touched; the lower-case account next to it is lent as usual"', async () => {
    const ou = await createIsolatedOu(facts, { users: 0, serviceAccounts: 2 });
    const mount = `ldap-${++serial}`;
    try {
      expect((await s.request('POST', `sys/mounts/${mount}`, { body: { type: 'ldap' } })).status).toBe(204);
      await configure(s, facts, ou, {}, mount);
      const [admin, other] = ou.serviceAccounts as [SeededAccount, SeededAccount];
      const t = await tokenFor(`${mount}/library/*`, `denied_parameters = { "service_account_names" = ["${admin.name}"] }`);
      for (const v of [admin.name.toUpperCase(), [other.name, admin.name.toUpperCase()], `${other.name}, ${admin.name[0]!.toUpperCase()}${admin.name.slice(1)}`]) {
        const r = await s.request('POST', `${mount}/library/pool`, { token: t, body: { service_account_names: v } });
        expect(r.status, `${JSON.stringify(v)}: ${JSON.stringify(r.body)}`).toBe(403);
      }
      expect((await s.request('GET', `${mount}/library/pool`)).status).toBe(404);
      expect(await canBind(facts.url, admin.dn, admin.password)).toBe(true);
      expect((await s.request('POST', `${mount}/library/pool`, { token: t, body: { service_account_names: other.name.toUpperCase() } })).status).toBe(204);
      expect(await canBind(facts.url, other.dn, other.password)).toBe(false);
    } finally {
      await ou.cleanup();
    }
  });
});
