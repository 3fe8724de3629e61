/**
 * Every JSON answer says exactly `Content-Type: application/json`, as Vault does (strict clients compare the
 * header whole; Fastify's own JSON answers add `; charset=utf-8`).
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ listen: true });
  await s.request('PUT', 'sys/policies/acl/p', { body: { policy: 'path "sys/mounts" { capabilities = ["read"] }' } });
});
afterAll(() => s.close());

/** Over a real socket, so raw LIST and the HTTP layer's own answers are covered too. */
function send(method: string, path: string, opts: { token?: string; body?: string; headers?: Record<string, string> } = {}): Promise<{ status: number; type: string | undefined }> {
  const { hostname, port } = new URL(s.url);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, method, path, headers: { ...(opts.token ? { 'x-vault-token': opts.token } : {}), ...opts.headers } }, (res) => {
      res.resume().on('end', () => resolve({ status: res.statusCode ?? 0, type: res.headers['content-type'] }));
    });
    req.on('error', reject).end(opts.body);
  });
}

describe('Content-Type of JSON answers', () => {
  it.each([
    ['200 envelope', 'GET', '/v1/sys/mounts', { token: 'root' }, 200],
    ['200 raw (sys/health)', 'GET', '/v1/sys/health', {}, 200],
    ['200 raw list', 'LIST', '/v1/sys/policies/acl', { token: 'root' }, 200],
    ['200 OIDC discovery', 'GET', '/v1/identity/oidc/plugins/.well-known/openid-configuration', {}, 200],
    ['400 invalid input', 'POST', '/v1/sys/mounts/x', { token: 'root', body: '{"type": 1}' }, 400],
    ['400 unparsable JSON', 'POST', '/v1/sys/mounts/x', { token: 'root', body: '{"type":' }, 400],
    ['403 no token', 'GET', '/v1/sys/mounts', {}, 403],
    ['403 raw list without a token', 'LIST', '/v1/sys/policies/acl', {}, 403],
    ['404 no route', 'GET', '/v1/nowhere/at/all', { token: 'root' }, 404],
    ['404 outside /v1', 'GET', '/elsewhere', {}, 404],
    ['405 unsupported operation', 'DELETE', '/v1/sys/health', { token: 'root' }, 405],
    ['413 body too large without a token', 'POST', '/v1/sys/mounts/x', { headers: { 'content-length': String(2 * 1024 * 1024) } }, 413],
  ])('"%s is exactly application/json"', async (_label, method, path, opts, status) => {
    const r = await send(method, path, opts as { token?: string; body?: string; headers?: Record<string, string> });
    expect(r.status).toBe(status);
    expect(r.type).toBe('application/json');
  });

  it('"a 204 carries no body and no JSON content type"', async () => {
    const r = await send('PUT', '/v1/sys/policies/acl/q', { token: 'root', body: '{"policy":"path \\"x\\" { capabilities = [\\"read\\"] }"}' });
    expect(r.status).toBe(204);
    expect(r.type).toBeUndefined();
  });
});
