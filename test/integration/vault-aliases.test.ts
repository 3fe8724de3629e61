// Vault's own names for what the spec renamed or deprecated, so Vault clients need no change
// (design.md, "Where we deliberately differ", item 10; docs/decisions.md lists them).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFullServer, type FullServer } from '../support/full-server.ts';

let full: FullServer;
const req = (method: string, path: string, body?: unknown, token?: string | null) => full.server.request(method, path, { body, ...(token !== undefined ? { token } : {}) });

beforeAll(async () => {
  full = await startFullServer();
  expect((await req('POST', 'cloud/config', full.cloudConfig())).status).toBe(204);
  expect((await req('POST', 'auth/cloud/config', full.authConfig())).status).toBe(204);
  expect((await req('POST', 'sys/policies/acl/app', { policy: 'path "sys/mounts" { capabilities = ["read"] }' })).status).toBe(204);
});
afterAll(async () => {
  await full?.close();
});

/** Deprecated name, value sent, its token_* twin, the value stored, another value for the twin. */
const TOKEN_ALIASES: Array<[string, unknown, string, unknown, unknown]> = [
  ['policies', 'App, ops', 'token_policies', ['app', 'ops'], ['other']],
  ['ttl', '1h', 'token_ttl', 3600, 600],
  ['max_ttl', '2h', 'token_max_ttl', 7200, 9000],
  ['period', '30m', 'token_period', 1800, 60],
  ['num_uses', 5, 'token_num_uses', 5, 2],
  ['bound_cidrs', '127.0.0.1/32, 10.0.0.0/8', 'token_bound_cidrs', ['127.0.0.1/32', '10.0.0.0/8'], ['192.0.2.0/24']],
];

describe('auth/cloud/role/:name', () => {
  const bound = () => ({ bound_service_principal_ids: full.loginIdentity.principalId });
  const read = async (name: string) => (await req('GET', `auth/cloud/role/${name}`)).body.data;
  const write = async (name: string, body: Record<string, unknown>) => {
    const res = await req('POST', `auth/cloud/role/${name}`, { ...bound(), ...body });
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
  };

  it.each(TOKEN_ALIASES)('"a deprecated token field is upgraded into its token_* twin": %s alone sets %s; the read shows both names', async (alias, value, twin, stored) => {
    await write(`alone-${alias}`, { [alias]: value });
    expect(await read(`alone-${alias}`)).toMatchObject({ [twin]: stored, [alias]: stored });
  });

  it.each(TOKEN_ALIASES)('"both names of one field with different values are a 400 naming both": %s beside %s', async (alias, value, twin, _stored, other) => {
    const res = await req('POST', `auth/cloud/role/both-${alias}`, { ...bound(), [alias]: value, [twin]: other });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toContain(`"${alias}"`);
    expect(res.body.errors[0]).toContain(`"${twin}"`);
    expect((await req('GET', `auth/cloud/role/both-${alias}`)).status).toBe(404);
  });

  it.each(TOKEN_ALIASES)('"both names of one field with the same value are one write under the token_* name": %s beside %s', async (alias, value, twin, stored) => {
    await write(`same-${alias}`, { [alias]: value, [twin]: stored });
    const data = await read(`same-${alias}`);
    expect(data[twin]).toEqual(stored);
    expect(data).not.toHaveProperty(alias);
  });

  it.each(TOKEN_ALIASES)('"a later token_* write replaces the deprecated name": %s, then %s alone; the read no longer shows %s', async (alias, value, twin, _stored, other) => {
    await write(`later-${alias}`, { [alias]: value });
    await write(`later-${alias}`, { [twin]: other });
    const data = await read(`later-${alias}`);
    expect(data[twin]).toEqual(other);
    expect(data).not.toHaveProperty(alias);
  });

  it('"fields not sent keep their values": a write of another field leaves a deprecated name and its value', async () => {
    await write('kept', { ttl: '1h' });
    await write('kept', { token_policies: 'app' });
    expect(await read('kept')).toMatchObject({ ttl: 3600, token_ttl: 3600, token_policies: ['app'] });
  });

  it.each([
    ['ttl', { ttl: '2h', token_max_ttl: '1h' }, /field "ttl": 'ttl' cannot be greater than 'token_max_ttl'/],
    ['max_ttl', { token_ttl: '2h', max_ttl: '1h' }, /field "token_ttl": 'token_ttl' cannot be greater than 'max_ttl'/],
    ['num_uses', { num_uses: -1 }, /field "num_uses": 'num_uses' cannot be negative/],
    ['bound_cidrs', { bound_cidrs: 'not-a-cidr' }, /field "bound_cidrs": an element is not an IP address or CIDR block/],
    ['period', { period: '100000h' }, /field "period": token period/],
  ])('"errors name the field the client sent": %s', async (_name, body, message) => {
    const res = await req('POST', 'auth/cloud/role/refused', { ...bound(), ...body });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toMatch(message);
  });

  it('"a login gets the role\'s token settings", written under the deprecated names (hvac\'s create_role sends only these)', async () => {
    await write('legacy', { policies: 'app', ttl: '1h', max_ttl: '2h', num_uses: 3, bound_cidrs: '127.0.0.1/32' });
    const res = await req('POST', 'auth/cloud/login', { role: 'legacy', jwt: await full.mintLoginJwt() }, null);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth).toMatchObject({ policies: ['app', 'default'], lease_duration: 3600, num_uses: 3 });
    const self = await req('GET', 'auth/token/lookup-self', undefined, res.body.auth.client_token);
    expect(self.body.data).toMatchObject({ creation_ttl: 3600, num_uses: 2 });
    await write('legacy-elsewhere', { policies: 'app', bound_cidrs: '192.0.2.0/24' });
    const outside = await req('POST', 'auth/cloud/login', { role: 'legacy-elsewhere', jwt: await full.mintLoginJwt() }, null);
    expect(outside.status).toBe(403);
    expect(outside.body.errors[0]).toMatch(/token_bound_cidrs/);
  });

  it('"a login gets the role\'s token settings": a role written with period issues periodic tokens of that period', async () => {
    await write('periodic', { policies: 'app', period: '20m' });
    const res = await req('POST', 'auth/cloud/login', { role: 'periodic', jwt: await full.mintLoginJwt() }, null);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.auth.lease_duration).toBe(1200);
    const self = await req('GET', 'auth/token/lookup-self', undefined, res.body.auth.client_token);
    expect(self.body.data.period).toBe(1200);
  });
});

describe('cloud/roles/:name', () => {
  const groups = () => JSON.stringify([{ group_name: 'readers' }]);

  it('"azure_roles and azure_groups are cloud_roles and cloud_groups": the read shows the spec\'s names', async () => {
    const res = await req('POST', 'cloud/roles/vault-names', { azure_roles: full.readerRoles(), azure_groups: groups() });
    expect(res.status, JSON.stringify(res.body)).toBe(204);
    const data = (await req('GET', 'cloud/roles/vault-names')).body.data;
    expect(data.cloud_roles).toEqual([expect.objectContaining({ role_name: 'Reader', scope: `/subscriptions/${full.world.tenant.subscriptionId}` })]);
    expect(data.cloud_groups).toEqual([{ group_name: 'readers', object_id: full.world.tenant.groups.readers }]);
    expect(data).not.toHaveProperty('azure_roles');
    expect(data).not.toHaveProperty('azure_groups');
  });

  it.each([
    ['cloud_roles', 'azure_roles', () => full.readerRoles(), () => JSON.stringify([{ role_name: 'Owner', scope: `/subscriptions/${full.world.tenant.subscriptionId}` }])],
    ['cloud_groups', 'azure_groups', groups, () => JSON.stringify([{ group_name: 'writers' }])],
  ])('"both spellings of one field with different values are a 400 naming both": %s and %s', async (spec, vault, value, other) => {
    const res = await req('POST', 'cloud/roles/twice', { cloud_roles: full.readerRoles(), [spec]: value(), [vault]: other() });
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toContain(`"${spec}"`);
    expect(res.body.errors[0]).toContain(`"${vault}"`);
    expect((await req('GET', 'cloud/roles/twice')).status).toBe(404);
  });

  it('"both spellings of one field with the same value are one write"', async () => {
    const res = await req('POST', 'cloud/roles/same', { cloud_roles: full.readerRoles(), azure_roles: full.readerRoles(), cloud_groups: groups(), azure_groups: groups() });
    expect(res.status, JSON.stringify(res.body)).toBe(204);
    const data = (await req('GET', 'cloud/roles/same')).body.data;
    expect(data.cloud_roles).toEqual([expect.objectContaining({ role_name: 'Reader' })]);
    expect(data.cloud_groups).toEqual([expect.objectContaining({ group_name: 'readers' })]);
  });

  it('"a missing required field is named by every accepted spelling"', async () => {
    const res = await req('POST', 'cloud/roles/nothing', { ttl: '1h' });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/^missing required field "cloud_roles" \(or "azure_roles"\)/);
  });

  it.each([
    ['azure_roles', () => ({ azure_roles: '[{"scope": ' }), /field "azure_roles": not valid JSON/],
    ['azure_roles', () => ({ azure_roles: JSON.stringify([{ role_name: 'No Such Role', scope: `/subscriptions/${full.world.tenant.subscriptionId}` }]) }), /field "azure_roles": element 1: no role found/],
    ['azure_groups', () => ({ azure_roles: full.readerRoles(), azure_groups: JSON.stringify([{ object_id: 'nope' }]) }), /field "azure_groups": element 1: object_id is not a GUID/],
  ])('"errors name the field the client sent": %s', async (_name, body, message) => {
    const res = await req('POST', 'cloud/roles/refused', body());
    expect(res.status, JSON.stringify(res.body)).toBe(400);
    expect(res.body.errors[0]).toMatch(message);
  });
});

describe('sys/mounts/:path and sys/auth/:path', () => {
  it.each([
    ['sys/mounts/az', 'azure', 'cloud', 'az/config'], ['sys/mounts/ol', 'openldap', 'ldap', 'ol/static-role/'], ['sys/auth/az', 'azure', 'cloud', 'auth/az/role/'],
  ])('"mount types azure and openldap enable cloud and ldap; the stored and shown type is the spec\'s": %s type=%s', async (path, type, shown, probe) => {
    expect((await full.server.request('POST', path, { body: { type } })).status).toBe(204);
    expect((await full.server.request('GET', path)).body.data.type).toBe(shown);
    // The backend behind it answers its own paths (an empty list or config is a 404, not "no handler").
    const r = await full.server.request(probe.endsWith('/') ? 'LIST' : 'GET', probe);
    expect(JSON.stringify(r.body)).not.toMatch(/no handler for route|unsupported path/);
    expect((await full.server.request('DELETE', path)).status).toBe(204);
  });

  it('"a type that is neither a backend nor an alias is still a 400 naming the field"', async () => {
    const r = await full.server.request('POST', 'sys/mounts/x', { body: { type: 'azurex' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/field "type"/);
  });
});
