// Token roles (auth/token/roles/:name, auth/token/create/:role) and auth/token/tidy, with Vault's rules.
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const clock = new FakeClock();
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ clock });
  for (const name of ['app', 'ops', 'dev-a', 'dev-b', 'audit']) {
    expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: `path "${name}/*" { capabilities = ["read"] }` } })).status).toBe(204);
  }
});
afterAll(() => s.close());

const writeRole = (name: string, body: Record<string, unknown>) => s.request('POST', `auth/token/roles/${name}`, { body });
const readRole = async (name: string) => (await s.request('GET', `auth/token/roles/${name}`)).body.data;
const createWith = (role: string, body: Record<string, unknown> = {}, token = 'root') => s.request('POST', `auth/token/create/${role}`, { body, token });
async function tokenWith(policies: string[]): Promise<string> {
  return (await s.request('POST', 'auth/token/create', { body: { policies } })).body.auth.client_token;
}
/** A token that may use every token role and nothing else of note. */
async function roleUser(): Promise<string> {
  expect((await s.request('PUT', 'sys/policies/acl/role-user', { body: { policy: 'path "auth/token/create/*" { capabilities = ["update"] }' } })).status).toBe(204);
  return tokenWith(['role-user']);
}

describe('auth/token/roles/:name', () => {
  it('"write then read: Vault\'s fields with their defaults, legacy names beside the token_ ones"', async () => {
    expect((await writeRole('shape', { allowed_policies: 'app, Ops', path_suffix: 'v1', token_period: '1h', token_num_uses: 3 })).status).toBe(204);
    expect(await readRole('shape')).toEqual({
      name: 'shape', allowed_policies: ['app', 'ops'], disallowed_policies: [], allowed_policies_glob: [], disallowed_policies_glob: [],
      orphan: false, renewable: true, path_suffix: 'v1', allowed_entity_aliases: [], token_type: 'default-service',
      token_period: 3600, period: 3600, token_explicit_max_ttl: 0, explicit_max_ttl: 0, token_num_uses: 3,
      token_no_default_policy: false, token_bound_cidrs: [], bound_cidrs: [],
    });
  });

  it('"names are canonical: written as Ops-Role, read, used and deleted as ops-role"', async () => {
    expect((await writeRole('Ops-Role', { allowed_policies: ['ops'] })).status).toBe(204);
    expect((await readRole('ops-role')).name).toBe('ops-role');
    expect((await readRole('OPS-ROLE')).allowed_policies).toEqual(['ops']);
    expect((await createWith('OPS-role')).body.auth.policies).toEqual(['default', 'ops']);
    expect((await s.request('DELETE', 'auth/token/roles/OPS-ROLE')).status).toBe(204);
    expect((await s.request('GET', 'auth/token/roles/ops-role')).status).toBe(404);
  });

  it('"a partial update keeps what it does not send; the legacy period, explicit_max_ttl and bound_cidrs set the token_ fields; both names with different values are a 400"', async () => {
    await writeRole('partial', { allowed_policies: ['app'], orphan: true });
    expect((await writeRole('partial', { period: '30m', explicit_max_ttl: '2h', bound_cidrs: '10.0.0.0/8' })).status).toBe(204);
    expect(await readRole('partial')).toMatchObject({ allowed_policies: ['app'], orphan: true, token_period: 1800, token_explicit_max_ttl: 7200, token_bound_cidrs: ['10.0.0.0/8'] });
    const both = await writeRole('partial', { token_period: '10m', period: '20m' });
    expect(both.status).toBe(400);
    expect(both.body.errors[0]).toMatch(/"period" and "token_period" name one field/);
    expect((await readRole('partial')).token_period).toBe(1800);
  });

  it('"root or response-wrapping in allowed_policies or allowed_policies_glob (any case or spacing, list or comma form) is a 400 naming the field; nothing is stored"', async () => {
    for (const [fieldName, value] of [['allowed_policies', 'app, Root'], ['allowed_policies', [' response-wrapping ']], ['allowed_policies_glob', 'ROOT'], ['allowed_policies_glob', ['dev-*', 'response-wrapping']]] as const) {
      const r = await writeRole('reserved', { [fieldName]: value });
      expect(r.status, `${fieldName}=${JSON.stringify(value)}`).toBe(400);
      expect(r.body.errors[0]).toMatch(new RegExp(`^invalid value for field "${fieldName}": the "(root|response-wrapping)" policy cannot be assigned by a role`));
    }
    expect((await s.request('GET', 'auth/token/roles/reserved')).status).toBe(404);
  });

  it('"batch token types, path suffixes that are not clean path segments and bad CIDRs are 400s naming the field"', async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ token_type: 'batch' }, 'token_type'], [{ token_type: 'default-batch' }, 'token_type'], [{ token_type: 'other' }, 'token_type'],
      [{ path_suffix: '../x' }, 'path_suffix'], [{ path_suffix: 'a//b' }, 'path_suffix'], [{ path_suffix: '/v1' }, 'path_suffix'], [{ path_suffix: 'v 1' }, 'path_suffix'],
      [{ path_suffix: 'v'.repeat(257) }, 'path_suffix'], [{ token_bound_cidrs: 'nonsense' }, 'token_bound_cidrs'], [{ bound_cidrs: '10.0.0.0/33' }, 'bound_cidrs'],
      [{ token_period: '100000h' }, 'token_period'],
    ];
    for (const [body, fieldName] of cases) {
      const r = await writeRole('bad', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0], JSON.stringify(body)).toMatch(new RegExp(`^invalid value for field "${fieldName}"`));
    }
    expect((await writeRole('svc', { token_type: 'service' })).status).toBe(204);
    expect((await readRole('svc')).token_type).toBe('service');
  });
});

describe('auth/token/roles', () => {
  it('"LIST returns the role names, canonical"', async () => {
    await writeRole('Listed-One', {});
    await writeRole('listed-two', {});
    const keys = (await s.request('LIST', 'auth/token/roles')).body.data.keys;
    expect(keys).toEqual(expect.arrayContaining(['listed-one', 'listed-two']));
  });
});

describe('auth/token/create/:role', () => {
  it('"without requested policies a token gets the role\'s allowed_policies plus default, even ones its creator lacks"', async () => {
    await writeRole('grant', { allowed_policies: ['app', 'ops'] });
    const r = await createWith('grant', {}, await roleUser());
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.auth.policies).toEqual(['app', 'default', 'ops']);
  });

  it('"requested policies must each be in allowed_policies or match allowed_policies_glob, else 400"', async () => {
    await writeRole('globbed', { allowed_policies: ['app'], allowed_policies_glob: ['dev-*'] });
    const user = await roleUser();
    expect((await createWith('globbed', { policies: ['app', 'dev-a', 'dev-b'] }, user)).body.auth.policies).toEqual(['app', 'default', 'dev-a', 'dev-b']);
    const r = await createWith('globbed', { policies: ['app', 'ops'] }, user);
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/^invalid value for field "policies": token policies \(.*"ops".*\) must be subset of the role's allowed policies \(.*\) or glob policies \(\["dev-\*"\]\)$/);
  });

  it('"disallowed_policies and disallowed_policies_glob refuse a policy with a 400 naming it; a role with only those lists allows anything else"', async () => {
    await writeRole('blocking', { disallowed_policies: ['audit'], disallowed_policies_glob: ['dev-*'] });
    const user = await roleUser();
    expect((await createWith('blocking', { policies: ['ops'] }, user)).body.auth.policies).toEqual(['default', 'ops']);
    for (const [policy, named] of [['audit', 'audit'], ['dev-b', 'dev-b']]) {
      const r = await createWith('blocking', { policies: ['ops', policy] }, user);
      expect(r.status).toBe(400);
      expect(r.body.errors).toEqual([`invalid value for field "policies": token policy "${named}" is disallowed by this role`]);
    }
  });

  it('"a role without policy lists keeps the ordinary rule: a subset of the creator\'s policies"', async () => {
    await writeRole('plain', {});
    const user = await tokenWith(['role-user', 'app']);
    expect((await createWith('plain', { policies: ['app'] }, user)).body.auth.policies).toEqual(['app', 'default']);
    expect((await createWith('plain', { policies: ['ops'] }, user)).status).toBe(403);
  });

  it('"a role never yields root or response-wrapping: a `*` glob asked for root is a 400, also for a root creator, and so is a listless role inheriting root"', async () => {
    await writeRole('everything', { allowed_policies_glob: ['*'] });
    await writeRole('inherit', {});
    for (const [role, body] of [['everything', { policies: ['root'] }], ['everything', { policies: ['response-wrapping'] }], ['inherit', {}]] as const) {
      const r = await createWith(role, body);
      expect(r.status, `${role} ${JSON.stringify(body)}`).toBe(400);
      expect(r.body.errors[0]).toMatch(/^invalid value for field "policies": the "(root|response-wrapping)" policy cannot be assigned by a role$/);
    }
  });

  it('"an orphan role makes orphans without sudo; the token path is auth/token/create/<role>/<path_suffix>, so revoke-prefix ends one generation"', async () => {
    await writeRole('gen', { allowed_policies: ['app'], orphan: true, path_suffix: 'v1' });
    const user = await roleUser();
    const r = await createWith('gen', {}, user);
    expect(r.body.auth.orphan).toBe(true);
    const token = r.body.auth.client_token;
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).body.data).toMatchObject({ path: 'auth/token/create/gen/v1', orphan: true });
    expect((await s.request('PUT', 'sys/leases/revoke-prefix/auth/token/create/gen/v1')).status).toBe(204);
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).status).toBe(403);
    await writeRole('gen', { orphan: false });
    expect((await createWith('gen', {}, user)).body.auth.orphan).toBe(false);
  });

  it('"period, explicit max TTL and num_uses are the lesser of role and request, with Vault\'s warnings; renewable false and bound CIDRs carry over"', async () => {
    await writeRole('limits', { allowed_policies: ['app'], token_period: '1h', token_explicit_max_ttl: '2h', token_num_uses: 5, renewable: false, token_bound_cidrs: ['127.0.0.1/32'] });
    const r = await createWith('limits', { period: '30m', explicit_max_ttl: '3h', num_uses: 9 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.warnings).toEqual([
      'Period specified both during creation call and in role; using the lesser value of 1800 seconds',
      'Explicit max TTL specified both during creation call and in role; using the lesser value of 7200 seconds',
    ]);
    expect(r.body.auth).toMatchObject({ lease_duration: 1800, renewable: false, num_uses: 5 });
    const look = (await s.request('POST', 'auth/token/lookup', { body: { token: r.body.auth.client_token } })).body.data;
    expect(look).toMatchObject({ period: 1800, explicit_max_ttl: 7200, num_uses: 5, renewable: false });
    // Without a request value the role's applies, with no warning; the token is bound to the role's CIDRs.
    const plain = await createWith('limits', {}, await roleUser());
    expect(plain.body.warnings).toBeNull();
    expect(plain.body.auth).toMatchObject({ lease_duration: 3600, num_uses: 5 });
    expect((await s.request('GET', 'auth/token/lookup-self', { token: plain.body.auth.client_token })).status).toBe(200);
    expect((await s.request('POST', 'auth/token/renew-self', { token: plain.body.auth.client_token })).body.errors).toEqual(['lease is not renewable']);
    await writeRole('elsewhere', { allowed_policies: ['app'], token_bound_cidrs: '10.0.0.0/8' });
    const bound = (await createWith('elsewhere')).body.auth.client_token;
    expect((await s.request('GET', 'auth/token/lookup-self', { token: bound })).status).toBe(403);
  });

  it('"entity_alias must be allowed by allowed_entity_aliases (names or globs, any case); the token gets that alias\'s entity"', async () => {
    await writeRole('aliased', { allowed_policies: ['app'], allowed_entity_aliases: ['build-*', 'Deployer'] });
    const first = await createWith('aliased', { entity_alias: 'build-7' });
    expect(first.status, JSON.stringify(first.body)).toBe(200);
    expect(first.body.auth.entity_id).toMatch(/^[0-9a-f-]{36}$/);
    expect((await createWith('aliased', { entity_alias: 'build-7' })).body.auth.entity_id).toBe(first.body.auth.entity_id);
    expect((await createWith('aliased', { entity_alias: 'deployer' })).status).toBe(200);
    const r = await createWith('aliased', { entity_alias: 'intruder' });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(["invalid value for field \"entity_alias\": the role's allowed_entity_aliases do not allow it"]);
  });

  it.each([
    ['allowed_policies, nothing requested', { allowed_policies: 'app', token_no_default_policy: true }, {}, ['app']],
    ['allowed_policies, the request not asking for it', { allowed_policies: 'app', token_no_default_policy: true }, { no_default_policy: false }, ['app']],
    ['disallowed_policies only', { disallowed_policies: 'audit', token_no_default_policy: true }, { policies: 'app' }, ['app']],
    ['allowed_policies_glob', { allowed_policies_glob: 'dev-*', token_no_default_policy: true }, { policies: 'dev-a' }, ['dev-a']],
    ['no policy lists (the ordinary rules)', { token_no_default_policy: true }, { policies: 'app' }, ['app']],
    ['disallowed_policies_glob matching default', { allowed_policies: 'app', disallowed_policies_glob: 'def*' }, {}, ['app']],
    ['the flag off: default is added', { allowed_policies: 'app', token_no_default_policy: false }, {}, ['app', 'default']],
  ])('"a role\'s token_no_default_policy (or a disallowed glob matching default) keeps default off its tokens": %s', async (_label, role, body, policies) => {
    const name = `nodefault-${Object.keys(role).join('-').replace(/_/g, '')}-${policies.length}-${JSON.stringify(body).length}`;
    expect((await writeRole(name, role)).status).toBe(204);
    const r = await createWith(name, body);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.auth.policies).toEqual(policies);
    expect((await s.request('POST', 'auth/token/lookup', { body: { token: r.body.auth.client_token } })).body.data.policies).toEqual(policies);
  });

  it('"an unknown role is a 400 naming role_name"', async () => {
    const r = await createWith('nope');
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['invalid value for field "role_name": unknown role "nope"']);
  });
});

describe('auth/token/tidy', () => {
  it('"answers 202 without warnings, removes accessor, parent and revocation entries left without their token, keeps those of live tokens, and logs counts only"', async () => {
    expect((await s.request('PUT', 'sys/policies/acl/creator', { body: { policy: 'path "auth/token/create" { capabilities = ["update"] }' } })).status).toBe(204);
    const parent = (await s.request('POST', 'auth/token/create', { body: { policies: ['creator', 'app'] } })).body.auth;
    const child = (await s.request('POST', 'auth/token/create', { token: parent.client_token, body: { policies: ['app'] } })).body.auth;
    const view = s.core.systemView.sub('token/');
    const parentSalted = s.core.tokens.salt(parent.client_token);
    await view.put('accessor/hstaleaccessor', Buffer.from('hgone1'));
    await view.put(`parent/${parentSalted}/hgone2`, Buffer.alloc(0));
    await view.put('revoking/hgone3', Buffer.alloc(0));
    const info = vi.spyOn(s.core.logger, 'info');

    const r = await s.request('POST', 'auth/token/tidy');
    expect(r.status).toBe(202);
    expect(r.body).toMatchObject({ data: null, warnings: null });
    expect(await view.get('accessor/hstaleaccessor')).toBeUndefined();
    expect(await view.get(`parent/${parentSalted}/hgone2`)).toBeUndefined();
    expect(await view.get('revoking/hgone3')).toBeUndefined();
    expect(await s.core.tokens.children(parentSalted)).toEqual([s.core.tokens.salt(child.client_token)]);
    expect((await s.request('POST', 'auth/token/lookup-accessor', { body: { accessor: child.accessor } })).status).toBe(200);

    const line = info.mock.calls.find(([, message]) => message === 'token tidy removed index entries without a token')!;
    expect(line[0]).toEqual({ accessor_entries: 1, parent_entries: 1, revocation_markers: 1 });
    info.mockRestore();
  });
});
