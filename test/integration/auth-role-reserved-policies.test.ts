// "No login can mint root": every auth role path refuses a reserved policy (root, response-wrapping) at
// write time, in any spelling, in token_policies and in the legacy policies field. The paths are found by
// scanning the mounted auth methods for definitions that declare token_policies (the shared token fields),
// so a role path added later fails here until it has a row below.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

const PRINCIPAL = '6f1c2d3e-4b5a-4c6d-8e7f-0a1b2c3d4e5f';

/** Per role pattern: a concrete role path and the other fields a valid write of it needs. */
const ROLE_PATHS: Record<string, { path: string; body: Record<string, unknown> }> = {
  'auth/cloud/role/(?<name>\\w(?:[\\w.-]*\\w)?)': { path: 'auth/cloud/role/guarded', body: { bound_service_principal_ids: PRINCIPAL } },
};

const SPELLINGS: Array<[string, unknown]> = [
  ['root', 'root'],
  ['upper case', 'ROOT'],
  ['surrounding spaces', ' root '],
  ['a trailing no-break space', 'root\u00a0'],
  ['a JSON list', ['default', 'root']],
  ['a comma string', 'default,root'],
  ['response-wrapping', 'response-wrapping'],
];

let server: TestServer;

beforeAll(async () => {
  server = await startTestServer();
});
afterAll(async () => {
  await server?.close();
});

/** Every auth path pattern that declares the shared token fields (auth/token/create's `policies` is not a role's). */
function discoveredRolePatterns(): string[] {
  return server.core.mounts.all()
    .filter((m) => m.class === 'auth')
    .flatMap((m) => (server.core.mountedBackend(m.path)?.paths ?? [])
      .filter((def) => def.fields && 'token_policies' in def.fields)
      .map((def) => `${m.path}${def.pattern}`));
}

describe('auth role paths', () => {
  it('"every auth role path there is" is covered by the table below', () => {
    const found = discoveredRolePatterns();
    expect(found.length).toBeGreaterThan(0);
    expect(found.filter((p) => !(p in ROLE_PATHS))).toEqual([]);
  });
});

describe.each(Object.values(ROLE_PATHS))('$path', ({ path, body }) => {
  describe.each(['token_policies', 'policies'])('%s', (field) => {
    it.each(SPELLINGS)('"a reserved policy cannot be assigned by a role": %s is a 400 naming the field, and the role keeps its policies', async (_name, value) => {
      const seeded = await server.request('POST', path, { body: { ...body, token_policies: 'app' } });
      expect(seeded.status, JSON.stringify(seeded.body)).toBeLessThan(300);
      const res = await server.request('POST', path, { body: { ...body, [field]: value } });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body.errors[0]).toContain(`"${field}"`);
      expect(res.body.errors[0]).toMatch(/"(root|response-wrapping)" policy cannot be assigned by a role/);
      const stored = await server.request('GET', path);
      expect(stored.body.data.token_policies).toEqual(['app']);
    });
  });

  it('a legacy policies value with root is refused even when token_policies, which would win, is clean', async () => {
    const res = await server.request('POST', path, { body: { ...body, token_policies: 'app', policies: 'root' } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toContain('"policies"');
  });

  it('names that merely contain a reserved one are ordinary policies', async () => {
    const res = await server.request('POST', path, { body: { ...body, token_policies: 'rooted, root-admin, response-wrapping-audit' } });
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
    expect((await server.request('GET', path)).body.data.token_policies).toEqual(['rooted', 'root-admin', 'response-wrapping-audit']);
  });
});
