// `?help=1` (vault path-help, node-vault's help): Vault's {help, see_also, openapi}, written from the same field
// definitions as the server's OpenAPI document.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodeVault from 'node-vault';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ listen: true });
});
afterAll(async () => {
  await s?.close();
});

const bodyProperties = (doc: any, path: string): string[] => Object.keys(doc.paths[path].post.requestBody.content['application/json'].schema.properties).sort();

describe('GET <path>?help=1', () => {
  it('"answers the path\'s help, not its data": Vault\'s shape {help, see_also, openapi}', async () => {
    await s.request('POST', 'ldap/config', { body: { binddn: 'cn=x,dc=example,dc=org', bindpass: 'p', url: 'ldap://127.0.0.1:1' } });
    const r = await s.request('GET', 'ldap/config?help=1');
    expect(r.status).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(['help', 'openapi', 'see_also']);
    expect(r.body.help).toMatch(/^Request: {8}config\nMatching Route: \^config\$/);
    expect(JSON.stringify(r.body)).not.toContain('cn=x,dc=example,dc=org');
  });

  it('"from the same field definitions the OpenAPI document uses": every field the document lists is in the help, and the help\'s document agrees', async () => {
    const full = (await s.request('GET', 'sys/internal/specs/openapi')).body;
    for (const path of ['ldap/config', 'ldap/static-role/app', 'auth/token/create', 'sys/mounts/x']) {
      const help = (await s.request('GET', `${path}?help=1`)).body;
      const template = Object.keys(help.openapi.paths).find((p) => p.includes('/') && (full.paths[p]?.post));
      expect(template, path).toBeDefined();
      const names = bodyProperties(full, template!);
      expect(bodyProperties(help.openapi, template!)).toEqual(names);
      for (const name of names) expect(help.help, `${path}: ${name}`).toContain(`\n    ${name} (`);
    }
  });

  it('"a path parameter is listed too": static-role/<name>', async () => {
    const r = await s.request('GET', 'ldap/static-role/app?help=1');
    expect(r.body.help).toContain('    name (');
  });

  it('"help=0 and no help are ordinary reads"', async () => {
    const r = await s.request('GET', 'ldap/config?help=0');
    expect(r.status).toBe(200);
    expect(r.body.data.binddn).toBe('cn=x,dc=example,dc=org');
  });

  it('"a token with no capability on the path gets 403; any capability shows the help"', async () => {
    await s.request('PUT', 'sys/policies/acl/writer', { body: { policy: 'path "ldap/config" { capabilities = ["update"] }' } });
    const writer = (await s.request('POST', 'auth/token/create', { body: { policies: ['writer'], no_default_policy: true } })).body.auth.client_token;
    const none = (await s.request('POST', 'auth/token/create', { body: { policies: ['default'] } })).body.auth.client_token;
    expect((await s.request('GET', 'ldap/config?help=1', { token: writer })).status).toBe(200);
    expect((await s.request('GET', 'ldap/config?help=1', { token: none })).status).toBe(403);
    expect((await s.request('GET', 'ldap/config?help=1', { token: null })).status).toBe(403);
  });

  it('"an unknown path is a 404 with a message"', async () => {
    const r = await s.request('GET', 'ldap/nosuch?help=1');
    expect(r.status).toBe(404);
    expect(r.body.errors.length).toBeGreaterThan(0);
  });

  it('"node-vault\'s help(path)" gets it', async () => {
    const vault = nodeVault({ endpoint: s.url, token: 'root', apiVersion: 'v1' });
    const r = await vault.help('auth/token/create');
    expect(r.help).toContain('    policies (');
    expect(r.openapi.paths['/auth/token/create']).toBeDefined();
  });
});
