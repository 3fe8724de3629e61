import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ backends: { secret: { test: testBackend(new Map<string, TestBackendProbe>()) }, auth: {} } });
  await s.request('POST', 'sys/mounts/secret', { body: { type: 'test' } });
  for (const k of ['app/one', 'app/two', 'team/a/config', 'team/b/config', 'admin/key']) await s.request('POST', `secret/data/${k}`, { body: { value: k } });
});
afterAll(() => s.close());

async function tokenWith(policy: string): Promise<string> {
  const name = `p${Math.random().toString(36).slice(2, 8)}`;
  const w = await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy } });
  expect(w.status).toBe(204);
  return (await s.request('POST', 'auth/token/create', { body: { policies: [name] } })).body.auth.client_token;
}

describe('sys/policies/acl', () => {
  it('"write, read and list a policy in HCL and JSON"', async () => {
    expect((await s.request('PUT', 'sys/policies/acl/Reader', { body: { policy: 'path "secret/*" { capabilities = ["read"] }' } })).status).toBe(204);
    expect((await s.request('GET', 'sys/policies/acl/reader')).body.data).toEqual({ name: 'reader', policy: 'path "secret/*" { capabilities = ["read"] }' });
    expect((await s.request('PUT', 'sys/policies/acl/json', { body: { policy: '{"path":{"secret/*":{"capabilities":["list"]}}}' } })).status).toBe(204);
    expect((await s.request('LIST', 'sys/policies/acl')).body.data.keys).toEqual(expect.arrayContaining(['default', 'json', 'reader', 'root']));
  });

  it('"a policy rewritten or deleted governs the very next request of a token that holds it, on every spelling of the path"', async () => {
    const name = 'rewritten';
    await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: 'path "secret/data/app/*" { capabilities = ["read"] }' } });
    const token = (await s.request('POST', 'auth/token/create', { body: { policies: [name] } })).body.auth.client_token;
    const read = (path: string) => s.request('GET', path, { token }).then((r) => r.status);
    // Asked twice: the second answer comes from the ACL built for the first.
    for (let i = 0; i < 2; i++) expect(await read('secret/data/app/one')).toBe(200);
    await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: 'path "secret/data/app/*" { capabilities = ["deny"] }' } });
    for (const path of ['secret/data/app/one', 'secret/data/app/two', 'secret//data/app/one']) expect(await read(path), path).toBe(403);
    await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy: 'path "secret/data/+/two" { capabilities = ["read"] }' } });
    expect(await read('secret/data/app/two')).toBe(200);
    expect(await read('secret/data/app/one')).toBe(403);
    await s.request('DELETE', `sys/policies/acl/${name}`);
    expect(await read('secret/data/app/two')).toBe(403);
  });

  it('"a policy that does not parse is 400 naming the line"', async () => {
    const r = await s.request('PUT', 'sys/policies/acl/bad', { body: { policy: 'path "x" {\n  capabilities = ["reed"]\n}' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/invalid capability on line 2/);
    expect(r.body.errors[0]).not.toContain('reed');
    expect((await s.request('GET', 'sys/policies/acl/bad')).status).toBe(404);
    expect((await s.request('PUT', 'sys/policies/acl/bad2', { body: { policy: 'path "x" {\n  capabilities = [\n}' } })).body.errors[0]).toMatch(/line \d+/);
  });

  it('"the default policy cannot be deleted; root cannot be changed"', async () => {
    expect((await s.request('DELETE', 'sys/policies/acl/default')).body.errors).toEqual(['cannot delete default policy']);
    expect((await s.request('PUT', 'sys/policies/acl/root', { body: { policy: 'path "*" { capabilities = ["read"] }' } })).status).toBe(400);
  });

  it('"the legacy sys/policy path reads rules"', async () => {
    expect((await s.request('GET', 'sys/policy/reader')).body.data.rules).toMatch(/secret/);
  });
});

describe('ACL enforcement', () => {
  it.each([
    ['prefix glob allows below it', 'path "secret/data/app/*" { capabilities = ["read"] }', 'GET', 'secret/data/app/one', 200],
    ['prefix glob does not reach siblings', 'path "secret/data/app/*" { capabilities = ["read"] }', 'GET', 'secret/data/team/a/config', 403],
    ['+ matches exactly one segment', 'path "secret/data/team/+/config" { capabilities = ["read"] }', 'GET', 'secret/data/team/b/config', 200],
    ['+ does not match two segments', 'path "secret/data/+/config" { capabilities = ["read"] }', 'GET', 'secret/data/team/a/config', 403],
    ['deny wins on the same path', 'path "secret/data/admin/key" { capabilities = ["read"] }\npath "secret/data/admin/key" { capabilities = ["deny"] }', 'GET', 'secret/data/admin/key', 403],
    ['the more specific rule wins over a broader glob', 'path "secret/*" { capabilities = ["read"] }\npath "secret/data/admin/*" { capabilities = ["deny"] }', 'GET', 'secret/data/admin/key', 403],
    ['read does not grant update', 'path "secret/*" { capabilities = ["read"] }', 'POST', 'secret/data/app/one', 403],
    ['update on an existing item needs update', 'path "secret/*" { capabilities = ["update"] }', 'POST', 'secret/data/app/one', 204],
    ['a new item needs create, not update', 'path "secret/*" { capabilities = ["update"] }', 'POST', 'secret/data/app/new', 403],
    ['list needs list', 'path "secret/data/*" { capabilities = ["list"] }', 'LIST', 'secret/data/app', 200],
    ['an unmounted path with no grant is 403 not 404', 'path "secret/*" { capabilities = ["read"] }', 'GET', 'nowhere/x', 403],
    ['sys/mounts needs a grant', 'path "secret/*" { capabilities = ["read"] }', 'GET', 'sys/mounts', 403],
  ])('"%s"', async (_rule, policy, method, path, status) => {
    const token = await tokenWith(policy);
    const body = method === 'POST' ? { value: 'v' } : undefined;
    expect((await s.request(method, path, { token, body })).status).toBe(status);
  });

  it('"enabling an auth method needs sudo on sys/auth/*"', async () => {
    const t = await tokenWith('path "sys/auth/*" { capabilities = ["create", "update"] }');
    expect((await s.request('POST', 'sys/auth/other', { token: t, body: { type: 'cloud' } })).status).toBe(403);
  });

  it('"the default policy lets a token look itself up"', async () => {
    const t = await tokenWith('path "secret/*" { capabilities = ["read"] }');
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(200);
  });
});

describe('sys/capabilities-self', () => {
  it('"returns the capabilities per path; root yields root"', async () => {
    const t = await tokenWith('path "secret/data/*" { capabilities = ["read", "list"] }');
    const r = await s.request('POST', 'sys/capabilities-self', { token: t, body: { paths: ['secret/data/x', 'sys/mounts'] } });
    expect(r.body.data['secret/data/x']).toEqual(['list', 'read']);
    expect(r.body.data['sys/mounts']).toEqual(['deny']);
    expect((await s.request('POST', 'sys/capabilities-self', { body: { paths: 'a' } })).body.data.capabilities).toEqual(['root']);
    expect((await s.request('POST', 'sys/capabilities-self', { body: {} })).status).toBe(400);
  });
});

describe('sys/policies/password', () => {
  const policy = 'length = 20\nrule "charset" {\n  charset = "abcdef"\n  min-chars = 2\n}\nrule "charset" {\n  charset = "0123"\n  min-chars = 3\n}';
  it('"write, read, generate, list and delete a password policy"', async () => {
    expect((await s.request('PUT', 'sys/policies/password/hex', { body: { policy } })).status).toBe(204);
    expect((await s.request('GET', 'sys/policies/password/hex')).body.data.policy).toBe(policy);
    const pw = (await s.request('GET', 'sys/policies/password/hex/generate')).body.data.password;
    expect(pw).toMatch(/^[abcdef0123]{20}$/);
    expect(pw.replace(/[^0123]/g, '').length).toBeGreaterThanOrEqual(3);
    expect((await s.request('LIST', 'sys/policies/password')).body.data.keys).toEqual(['hex']);
    expect((await s.request('DELETE', 'sys/policies/password/hex')).status).toBe(204);
    expect((await s.request('GET', 'sys/policies/password/hex/generate')).status).toBe(404);
  });

  it('"length must be between 4 and 100"', async () => {
    const r = await s.request('PUT', 'sys/policies/password/short', { body: { policy: 'length = 3\nrule "charset" { charset = "ab" }' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/between 4 and 100/);
  });
});
