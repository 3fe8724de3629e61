import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer();
  await s.request('POST', 'sys/policies/acl/dev', { body: { policy: 'path "secret/*" { capabilities = ["read"] }' } });
});
afterAll(() => s.close());

const create = async (body: Record<string, unknown> = {}, token = 'root') => s.request('POST', 'auth/token/create', { body, token });

describe('auth/token/create', () => {
  it('"returns an auth block with client_token, accessor, policies (+default), lease_duration, renewable"', async () => {
    const r = await create({ policies: ['dev'], ttl: '1h', display_name: 'ci bot' });
    expect(r.status).toBe(200);
    expect(r.body.data).toBeNull();
    expect(r.body.auth).toMatchObject({ policies: ['default', 'dev'], token_policies: ['default', 'dev'], lease_duration: 3600, renewable: true, orphan: false, token_type: 'service' });
    expect(r.body.auth.client_token).toMatch(/^hvs\.[A-Za-z0-9]{24}$/);
    expect(r.body.auth.accessor).toMatch(/^[A-Za-z0-9]{24}$/);
    const look = await s.request('GET', 'auth/token/lookup-self', { token: r.body.auth.client_token });
    expect(look.body.data).toMatchObject({ display_name: 'token-ci-bot', path: 'auth/token/create', policies: ['default', 'dev'] });
  });

  it('"warns for policies that do not exist"', async () => {
    expect((await create({ policies: ['ghost'] })).body.warnings).toEqual(['Policy "ghost" does not exist']);
  });

  it('"child policies must be a subset of the parent\'s"', async () => {
    const parent = (await create({ policies: ['dev'] })).body.auth.client_token;
    await s.request('POST', 'sys/policies/acl/creator', { body: { policy: 'path "auth/token/create" { capabilities = ["update"] }' } });
    const creator = (await create({ policies: ['dev', 'creator'] })).body.auth.client_token;
    expect((await create({ policies: ['ops'] }, creator)).status).toBe(403);
    expect((await create({ policies: ['dev'] }, creator)).status).toBe(200);
    expect((await create({}, parent)).status).toBe(403);
  });

  it('"no_parent needs sudo; create-orphan makes an orphan"', async () => {
    const r = await s.request('POST', 'auth/token/create-orphan', { body: { policies: ['dev'] } });
    expect(r.body.auth.orphan).toBe(true);
  });

  it('"ttl capped by explicit_max_ttl with a warning"', async () => {
    const r = await create({ ttl: '2h', explicit_max_ttl: '1h' });
    expect(r.body.auth.lease_duration).toBe(3600);
    expect(r.body.warnings[0]).toMatch(/exceeded the effective max_ttl/);
  });

  it('"a wrong field type is 400 naming the field"', async () => {
    expect((await create({ ttl: 'soon' })).body.errors[0]).toMatch(/^invalid value for field "ttl"/);
    expect((await create({ num_uses: 'x' })).status).toBe(400);
  });

  it('"num_uses: the token dies after its last use"', async () => {
    const t = (await create({ num_uses: 2 })).body.auth.client_token;
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(200);
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 20));
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(403);
  });
});

describe('auth/token/lookup, lookup-self, lookup-accessor', () => {
  it('"lookup returns the token\'s data; an unknown token is 403 bad token"', async () => {
    const t = (await create({ policies: ['dev'] })).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/lookup', { body: { token: t } })).body.data.id).toBe(t);
    expect(await s.request('POST', 'auth/token/lookup', { body: { token: 'hvs.missing' } })).toMatchObject({ status: 403, body: { errors: ['bad token'] } });
  });

  it('"lookup-accessor blanks the id; an unknown accessor is 400 invalid accessor"', async () => {
    const a = (await create()).body.auth.accessor;
    const r = await s.request('POST', 'auth/token/lookup-accessor', { body: { accessor: a } });
    expect(r.body.data).toMatchObject({ id: '', accessor: a });
    expect((await s.request('POST', 'auth/token/lookup-accessor', { body: { accessor: 'nope' } })).body.errors).toEqual(['invalid accessor']);
  });
});

describe('auth/token/renew, renew-self, renew-accessor', () => {
  it('"renew extends to the increment, never past explicit_max_ttl"', async () => {
    const t = (await create({ ttl: '10m', explicit_max_ttl: '30m' })).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/renew-self', { token: t, body: { increment: '20m' } })).body.auth.lease_duration).toBe(1200);
    expect((await s.request('POST', 'auth/token/renew', { body: { token: t, increment: '2h' } })).body.auth.lease_duration).toBeLessThanOrEqual(1800);
    const a = (await s.request('POST', 'auth/token/lookup', { body: { token: t } })).body.data.accessor;
    expect((await s.request('POST', 'auth/token/renew-accessor', { body: { accessor: a } })).status).toBe(200);
  });

  it('"a root token with no TTL is not renewable"', async () => {
    expect((await s.request('POST', 'auth/token/renew-self')).body.errors).toEqual(['lease is not renewable']);
  });
});

describe('auth/token/revoke, revoke-self, revoke-accessor, revoke-orphan', () => {
  it('"children are revoked with their parent"', async () => {
    await s.request('POST', 'sys/policies/acl/creator2', { body: { policy: 'path "auth/token/create" { capabilities = ["update"] }' } });
    const parent = (await create({ policies: ['creator2'] })).body.auth.client_token;
    const child = (await create({}, parent)).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/revoke', { body: { token: parent } })).status).toBe(204);
    expect((await s.request('GET', 'auth/token/lookup-self', { token: child })).status).toBe(403);
  });

  it('"revoke-orphan keeps the children as orphans"', async () => {
    await s.request('POST', 'sys/policies/acl/creator3', { body: { policy: 'path "auth/token/create" { capabilities = ["update"] }' } });
    const parent = (await create({ policies: ['creator3'] })).body.auth.client_token;
    const child = (await create({}, parent)).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/revoke-orphan', { body: { token: parent } })).status).toBe(204);
    const look = await s.request('GET', 'auth/token/lookup-self', { token: child });
    expect(look.body.data.orphan).toBe(true);
  });

  it('"revoke-self and revoke-accessor end the token; an unknown token is a silent 204"', async () => {
    const t = (await create()).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/revoke-self', { token: t })).status).toBe(204);
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(403);
    const a = (await create()).body.auth.accessor;
    expect((await s.request('POST', 'auth/token/revoke-accessor', { body: { accessor: a } })).status).toBe(204);
    expect((await s.request('POST', 'auth/token/lookup-accessor', { body: { accessor: a } })).status).toBe(400);
    expect((await s.request('POST', 'auth/token/revoke', { body: { token: 'hvs.unknown' } })).status).toBe(204);
  });

  it('"accessors LIST needs sudo"', async () => {
    expect((await s.request('LIST', 'auth/token/accessors')).body.data.keys.length).toBeGreaterThan(3);
    const t = (await create({ policies: ['dev'] })).body.auth.client_token;
    expect((await s.request('LIST', 'auth/token/accessors', { token: t })).status).toBe(403);
  });
});

describe('auth/token/lookup (fields Vault clients read)', () => {
  it('"shows the token role it was created by and its bound CIDRs, as Vault\'s lookup does"', async () => {
    expect((await s.request('POST', 'auth/token/roles/ci', { body: { allowed_policies: 'dev', token_bound_cidrs: '127.0.0.1/32' } })).status).toBe(204);
    const t = (await s.request('POST', 'auth/token/create/ci', { body: {} })).body.auth.client_token;
    const look = await s.request('POST', 'auth/token/lookup', { body: { token: t } });
    expect(look.body.data).toMatchObject({ role: 'ci', path: 'auth/token/create/ci', bound_cidrs: ['127.0.0.1/32'] });
    const plain = (await create({ policies: ['dev'] })).body.auth.client_token;
    expect((await s.request('GET', 'auth/token/lookup-self', { token: plain })).body.data).toMatchObject({ role: '', bound_cidrs: null });
  });
});

describe('sys/mounts/:path (fields Vault clients send)', () => {
  it('"seal_wrap, external_entropy_access, plugin_name and plugin_version are accepted without a warning"', async () => {
    const r = await s.request('POST', 'sys/mounts/compat', { body: { type: 'ldap', seal_wrap: false, external_entropy_access: false, plugin_name: null, plugin_version: '', options: null } });
    expect(r.status, JSON.stringify(r.body)).toBe(204);
  });
});
