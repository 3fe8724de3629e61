import SwaggerParser from '@apidevtools/swagger-parser';
import { OpenAPIClientAxios } from 'openapi-client-axios';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { templates } from '../../src/core/openapi.ts';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { ouConfig, ok } from '../support/ldap-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');

let full: FullServer;
let ou: IsolatedOu;
let doc: any;

const openapi = async (query = '', token: string | null = 'root') => {
  const r = await full.server.request('GET', `sys/internal/specs/openapi${query}`, { token });
  expect(r.status).toBe(200);
  return r.body;
};

beforeAll(async () => {
  ou = await createIsolatedOu(facts, { users: 2 });
  full = await startFullServer({ listen: true });
  await ok(full.server, 'POST', 'sys/mounts/ldap2', { type: 'ldap' });
  doc = await openapi();
});
afterAll(async () => {
  await full?.server.core.leases.idle();
  await full?.close();
  await ou?.cleanup();
});

describe('sys/internal/specs/openapi', () => {
  it('"is an OpenAPI 3.0 document a standard validator accepts"', async () => {
    expect(doc.openapi).toBe('3.0.3');
    await expect(SwaggerParser.validate(structuredClone(doc))).resolves.toBeTruthy();
    await expect(SwaggerParser.validate(structuredClone(await openapi('?generic_mount_paths=true')))).resolves.toBeTruthy();
  });

  it('"holds every path table entry of every mount: each operation at each of its templates, or the pattern listed as unexpressed with its reason"', () => {
    const unexpressed = new Set((doc['x-strongroom-unexpressed'] ?? []).map((u: { path: string }) => u.path));
    let checked = 0;
    for (const entry of full.server.core.mounts.all()) {
      for (const def of full.server.core.mountedBackend(entry.path)!.paths) {
        const t = templates(def.pattern);
        if ('reason' in t) {
          expect(unexpressed, `${entry.path}${def.pattern}`).toContain(`${entry.path}${def.pattern}`);
          continue;
        }
        const texts = new Set(t.variants.map((v) => v.text));
        for (const [op, method] of Object.entries({ read: 'get', list: 'get', create: 'post', update: 'post', patch: 'patch', delete: 'delete' })) {
          if (!def.operations[op as 'read']) continue;
          for (const text of texts) {
            // LIST lives on the template ending in "/"; the others on the one without, where the pattern allows both.
            const key = op === 'list' ? (text === '' || text.endsWith('/') ? text : `${text}/`) : text.endsWith('/') && texts.has(text.slice(0, -1)) ? text.slice(0, -1) : text;
            expect(doc.paths[`/${entry.path}${key}`]?.[method], `${method} /${entry.path}${key} (${def.pattern})`).toBeDefined();
            checked++;
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(150);
    expect(doc['x-strongroom-unexpressed']).toBeUndefined();
  });

  it('"a second ldap mount appears under its own path; generic_mount_paths names each mount with a {<mount>_mount_path} parameter, built-in mounts keep theirs"', async () => {
    expect(doc.paths['/ldap/static-role/{name}'].post).toBeDefined();
    expect(doc.paths['/ldap2/static-role/{name}'].post).toBeDefined();
    const generic = await openapi('?generic_mount_paths=true');
    expect(Object.keys(generic.paths)).toEqual(expect.arrayContaining(['/{ldap_mount_path}/config', '/{ldap2_mount_path}/config', '/auth/{cloud_mount_path}/login', '/{cloud_mount_path}/creds/{name}', '/sys/mounts', '/auth/token/create']));
    expect(generic.paths['/{ldap2_mount_path}/static-role/{name}'].parameters[0]).toEqual({
      name: 'ldap2_mount_path', in: 'path', required: true, description: 'Path that the backend was mounted at', schema: { type: 'string', default: 'ldap2' },
    });
  });

  it('"describes each field: its kind as a type, required, an enum where the field declares its values, defaults, descriptions; secrets are write-only"', () => {
    const config = doc.paths['/ldap/config'].post.requestBody.content['application/json'].schema.properties;
    expect(config.schema).toEqual({ type: 'string', description: expect.any(String), enum: ['openldap', 'racf', 'ad'] });
    expect(config.bindpass).toMatchObject({ type: 'string', format: 'password', writeOnly: true });
    expect(config.request_timeout).toMatchObject({ type: 'string', format: 'duration' });
    expect(config.insecure_tls).toMatchObject({ type: 'boolean' });
    const login = doc.paths['/auth/cloud/login'].post;
    expect(login.requestBody.content['application/json'].schema.required).toEqual(['role', 'jwt']);
    expect(login.security).toEqual([]);
    expect(login['x-vault-unauthenticated']).toBe(true);
    expect(doc.paths['/sys/auth/{path}'].post['x-vault-sudo']).toBe(true);
    expect(doc.paths['/ldap/static-role/{name}'].post['x-vault-createSupported']).toBe(true);
    expect(doc.paths['/sys/health'].get.parameters.map((p: { name: string }) => p.name)).toContain('standbyok');
  });

  it('"LIST is Vault\'s GET with list=true, on the template ending in /"', () => {
    expect(doc.paths['/ldap/static-role/'].get.parameters).toContainEqual(expect.objectContaining({ name: 'list', in: 'query', required: true, schema: { type: 'string', enum: ['true'] } }));
    expect(doc.paths['/ldap/static-role/{prefix}/'].get).toBeDefined();
  });

  it('"needs no token, as in Vault: without one only mounts tuned listing_visibility unauth appear; a token sees the mounts it has access to"', async () => {
    expect(Object.keys((await openapi('', null)).paths)).toEqual([]);
    // No endpoint tunes listing_visibility yet: the mount table is changed as a tune would.
    const ldap2 = full.server.core.mounts.get('ldap2/')!;
    await full.server.core.tuneMount({ ...ldap2, config: { ...ldap2.config, listing_visibility: 'unauth' } });
    const mountsOf = (d: any) => new Set(Object.keys(d.paths).map((p) => p.split('/')[1]));
    expect(mountsOf(await openapi('', null))).toEqual(new Set(['ldap2']));
    await ok(full.server, 'PUT', 'sys/policies/acl/ldap-only', { policy: 'path "ldap/*" { capabilities = ["read"] }' });
    const token = (await full.server.request('POST', 'auth/token/create', { body: { policies: ['ldap-only'] } })).body.auth.client_token;
    // The default policy's paths make sys/, identity/ and auth/token/ usable too.
    expect(mountsOf(await openapi('', token))).toEqual(new Set(['ldap', 'sys', 'identity', 'auth']));
    expect(Object.keys((await openapi('', token)).paths).filter((p) => p.startsWith('/auth/')).every((p) => p.startsWith('/auth/token/'))).toBe(true);
  });
});

describe('a generic OpenAPI client built from the document alone', () => {
  it('"calls each mount: sys, ldap against slapd, cloud against the emulator, auth/cloud"', async () => {
    const client = new OpenAPIClientAxios({ definition: doc, withServer: { url: `${full.server.url}/v1` }, axiosConfigDefaults: { headers: { 'X-Vault-Token': 'root' } } });
    const api = await client.init();
    const call = async (operationId: string, params?: Record<string, string>, body?: unknown) => {
      const r = await api[operationId]!(params, body);
      expect([200, 204], `${operationId}: ${JSON.stringify(r.data)}`).toContain(r.status);
      return r.data;
    };

    expect(await call('read-sys-health')).toMatchObject({ initialized: true, sealed: false });
    expect(await call('read-sys-mounts')).toHaveProperty('data.ldap/');
    expect(parseScrape(await call('read-sys-metrics', { format: 'prometheus' })).types.get('vault_token_creation')).toBe('COUNTER');

    await call('write-ldap-config', undefined, ouConfig(facts, ou));
    await call('write-ldap-static-role-name', { name: 'app' }, { username: ou.users[0]!.name, rotation_period: '1h' });
    expect((await call('list-ldap-static-role', { list: 'true' })).data.keys).toEqual(['app']);
    expect((await call('read-ldap-static-cred-name', { name: 'app' })).data.password).toEqual(expect.any(String));

    await call('write-cloud-config', undefined, full.cloudConfig());
    await call('write-cloud-roles-name', { name: 'reader' }, { azure_roles: full.readerRoles(), ttl: '1h' });
    const creds = await call('read-cloud-creds-name', { name: 'reader' });
    expect(creds.data).toMatchObject({ client_id: expect.any(String), client_secret: expect.any(String) });
    await call('write-sys-leases-revoke', undefined, { lease_id: creds.lease_id });

    await call('write-auth-cloud-config', undefined, full.authConfig());
    await call('write-auth-cloud-role-name', { name: 'ci' }, { policies: ['default'], bound_service_principal_ids: [full.loginIdentity.principalId] });
    const login = await call('write-auth-cloud-login', undefined, { role: 'ci', jwt: await full.mintLoginJwt() });
    expect(login.auth.client_token).toEqual(expect.any(String));
  });
});
