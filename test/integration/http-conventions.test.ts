import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { Writable } from 'node:stream';
import { promisify } from 'node:util';
import { createLogger } from '../../src/logger.ts';
import { createServer, type Server } from '../../src/server.ts';
import { loadSettings } from '../../src/settings.ts';

// curl runs asynchronously: the server under test lives in this process and must keep serving.
const curl = async (args: string[]) => (await promisify(execFile)('curl', args, { encoding: 'utf8' })).stdout;
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

let s: TestServer;
const probes = new Map<string, TestBackendProbe>();

beforeAll(async () => {
  s = await startTestServer({ listen: true, backends: { secret: { test: testBackend(probes) }, auth: {} }, env: { STRONGROOM_MAX_REQUEST_SIZE: '1024' } });
  expect((await s.request('POST', 'sys/mounts/kv', { body: { type: 'test' } })).status).toBe(204);
});
afterAll(() => s.close());

describe('the response envelope', () => {
  it('"Success with a body is 200 with request_id, lease_id, renewable, lease_duration, data, wrap_info, warnings, auth"', async () => {
    await s.request('POST', 'kv/data/a', { body: { value: 'x' } });
    const r = await s.request('GET', 'kv/data/a');
    expect(r.status).toBe(200);
    expect(Object.keys(r.body)).toEqual(['request_id', 'lease_id', 'renewable', 'lease_duration', 'data', 'wrap_info', 'warnings', 'auth', 'mount_type']);
    expect(r.body.request_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(r.body.data).toEqual({ value: 'x' });
    expect(r.headers['cache-control']).toBe('no-store');
  });

  it('"a write with no response body is 204; a read of a missing object is 404 with a message" (Vault\'s errors are empty: docs/decisions.md)', async () => {
    expect((await s.request('DELETE', 'kv/data/a')).status).toBe(204);
    const r = await s.request('GET', 'kv/data/a');
    expect(r.status).toBe(404);
    expect(r.body).toEqual({ errors: ['no value found at "kv/data/a"'] });
  });

  it('"unknown fields are ignored with a warning, and a 204 becomes 200 to carry it"', async () => {
    const r = await s.request('POST', 'kv/data/b', { body: { value: 'y', zeta: 1, alpha: 2 } });
    expect(r.status).toBe(200);
    expect(r.body.warnings).toEqual(['Endpoint ignored these unrecognized parameters: [alpha zeta]']);
    expect((await s.request('GET', 'kv/data/b')).body.data).toEqual({ value: 'y' });
  });

  it('"every response carries Cache-Control: no-store, errors too"', async () => {
    const r = await s.request('GET', 'kv/data/none');
    expect(r.headers['cache-control']).toBe('no-store');
  });
});

describe('LIST', () => {
  it('"GET ?list=true lists; an empty list is 404"', async () => {
    await s.request('POST', 'kv/data/dir/one', { body: { value: '1' } });
    await s.request('POST', 'kv/data/top', { body: { value: '1' } });
    const r = await s.request('GET', 'kv/data/?list=true');
    expect(r.status).toBe(200);
    expect(r.body.data.keys).toEqual(expect.arrayContaining(['dir/', 'top']));
    expect((await s.request('GET', 'kv/data/nothing/?list=true')).status).toBe(404);
    expect((await s.request('GET', 'kv/data/?list=maybe')).status).toBe(400);
  });

  it('"the HTTP method LIST works over a real socket (curl -X LIST)"', async () => {
    const out = await curl(['-s', '-X', 'LIST', '-H', 'X-Vault-Token: root', '-w', '\n%{http_code}', `${s.url}/v1/kv/data/dir`]);
    const [body, code] = out.trimEnd().split('\n');
    expect(code).toBe('200');
    expect(JSON.parse(body).data.keys).toEqual(['one']);
  });

  it('"LIST without a token is 403 over a real socket"', async () => {
    const out = await curl(['-s', '-X', 'LIST', '-w', '\n%{http_code}', `${s.url}/v1/sys/policies/acl`]);
    expect(out.trimEnd().split('\n').at(-1)).toBe('403');
  });
});

describe('token headers', () => {
  it.each([
    ['X-Service-Token', { 'x-service-token': 'root' }],
    ['X-Vault-Token', { 'x-vault-token': 'root' }],
    ['Authorization: Bearer', { authorization: 'Bearer root' }],
  ])('"the token is read from %s"', async (_name, headers) => {
    expect((await s.request('GET', 'sys/mounts', { token: null, headers })).status).toBe(200);
  });

  it('"a missing or invalid token is 403 permission denied"', async () => {
    expect(await s.request('GET', 'sys/mounts', { token: null })).toMatchObject({ status: 403, body: { errors: ['permission denied'] } });
    expect(await s.request('GET', 'sys/mounts', { token: 'hvs.nope' })).toMatchObject({ status: 403, body: { errors: ['permission denied'] } });
  });

  it('"sys/health and sys/seal-status need no token"', async () => {
    expect((await s.request('GET', 'sys/health', { token: null })).body).toMatchObject({ initialized: true, sealed: false });
    expect((await s.request('GET', 'sys/seal-status', { token: null })).status).toBe(200);
  });
});

describe('bad input', () => {
  it('"malformed JSON is 400 and nothing is written"', async () => {
    const r = await s.request('POST', 'kv/data/bad', { body: '{"value": ' });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/failed to parse JSON input/);
    expect((await s.request('GET', 'kv/data/bad')).status).toBe(404);
  });

  it('"a JSON body that is not an object is 400"', async () => {
    expect((await s.request('POST', 'kv/data/bad', { body: '[1,2]' })).status).toBe(400);
  });

  it('"a wrong type is 400 naming the field and the rule"', async () => {
    const r = await s.request('POST', 'kv/data/bad', { body: { count: 'many' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toBe('invalid value for field "count": expected an integer');
    expect((await s.request('GET', 'kv/data/bad')).status).toBe(404);
  });

  it('"an oversized body is 413"', async () => {
    const r = await s.request('POST', 'kv/data/big', { body: { value: 'x'.repeat(5000) } });
    expect(r.status).toBe(413);
    expect((await s.request('GET', 'kv/data/big')).status).toBe(404);
  });

  it('"an unknown path is 404 for a token allowed there, 403 otherwise"', async () => {
    expect((await s.request('GET', 'nothing/here')).body.errors[0]).toMatch(/no handler for route "nothing\/here"/);
    expect((await s.request('GET', 'kv/unknown')).body).toEqual({ errors: ['unsupported path'] });
  });

  it('"an unsupported operation is 405"', async () => {
    expect((await s.request('DELETE', 'sys/health')).status).toBe(405);
  });

  it.each([
    ['..', 'kv/data/../data/x'],
    ['%2e%2e', 'kv/data/%2e%2e/x'],
    ['NUL', 'kv/data/a%00b'],
    ['control characters', 'kv/data/a%0Ab'],
  ])('"a path with %s is refused with 400 and nothing is written" (real socket, path sent as is)', async (_what, path) => {
    const out = await curl(['-s', '--path-as-is', '-X', 'POST', '-H', 'X-Service-Token: root', '-d', '{"value":"z"}', '-w', '\n%{http_code}', `${s.url}/v1/${path}`]);
    const [body, code] = out.trimEnd().split('\n');
    expect(code).toBe('400');
    expect(JSON.parse(body).errors[0]).toMatch(/request path/);
    expect((await s.request('GET', 'kv/data/?list=true')).body.data.keys).not.toContain('x');
  });

  it('"an error never carries a stack trace"', async () => {
    const r = await s.request('POST', 'kv/data/bad', { body: '{' });
    expect(JSON.stringify(r.body)).not.toMatch(/at .*\.ts:\d+/);
  });
});

describe('mounts of the same engine type', () => {
  it('"a second mount of a backend is isolated from the first"', async () => {
    expect((await s.request('POST', 'sys/mounts/kv2', { body: { type: 'test' } })).status).toBe(204);
    await s.request('POST', 'kv/data/shared', { body: { value: 'first' } });
    expect((await s.request('GET', 'kv2/data/shared')).status).toBe(404);
    await s.request('POST', 'kv2/data/shared', { body: { value: 'second' } });
    expect((await s.request('GET', 'kv/data/shared')).body.data.value).toBe('first');
  });
});

describe('the access log', () => {
  let logged = '';
  let server: Server;
  let url: string;
  const lines = () => logged.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'request');
  beforeAll(async () => {
    const sink = new Writable({ write(chunk, _enc, done) { logged += chunk; done(); } });
    const settings = loadSettings({ STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: 'root-token-never-logged', STRONGROOM_STORAGE: 'memory' }, []);
    server = await createServer(settings, createLogger('info', sink), { backends: { secret: { test: testBackend(new Map()) }, auth: {} } });
    url = await server.app.listen({ host: '127.0.0.1', port: 0 });
    expect((await server.app.inject({ method: 'POST', url: '/v1/sys/mounts/kv', headers: { 'x-vault-token': 'root-token-never-logged' }, payload: { type: 'test' } })).statusCode).toBe(204);
  });
  afterAll(() => server.close());

  it('"a LIST answered from the raw packet logs the same line as any request: request id, method, path without query, mount, operation, status, ms; never the token"', async () => {
    logged = '';
    const secret = 'hvs.query-token-never-logged';
    for (const auth of [['-H', 'X-Vault-Token: root-token-never-logged'], ['-H', 'Authorization: Bearer root-token-never-logged'], []]) {
      await curl(['-s', '-o', '/dev/null', '-X', 'LIST', ...auth, `${url}/v1/sys/policies/acl?token=${secret}`]);
      await curl(['-s', '-o', '/dev/null', '-X', 'GET', ...auth, `${url}/v1/sys/policies/acl?list=true&token=${secret}`]);
    }
    await curl(['-s', '-o', '/dev/null', '--path-as-is', '-X', 'LIST', `${url}/v1/kv/data/%2e%2e/x?token=${secret}`]);
    await curl(['-s', '-o', '/dev/null', '-X', 'LIST', `${url}/elsewhere?token=${secret}`]);
    const got = lines();
    expect(got.map(({ method, path, status, mount, operation }) => [method, path, status, mount, operation])).toEqual([
      ['LIST', '/v1/sys/policies/acl', 200, 'sys/', 'list'], ['GET', '/v1/sys/policies/acl', 200, 'sys/', 'list'],
      ['LIST', '/v1/sys/policies/acl', 200, 'sys/', 'list'], ['GET', '/v1/sys/policies/acl', 200, 'sys/', 'list'],
      ['LIST', '/v1/sys/policies/acl', 403, 'sys/', 'list'], ['GET', '/v1/sys/policies/acl', 403, 'sys/', 'list'],
      // Refused before it was routed: no mount or operation to name.
      ['LIST', '/v1/kv/data/%2e%2e/x', 400, undefined, undefined],
      // Not an API path: the core never saw it.
      ['LIST', '/elsewhere', 404, undefined, undefined],
    ]);
    const fields = (line: Record<string, unknown>) => Object.keys(line).filter((k) => !['level', 'time', 'pid', 'hostname', 'msg'].includes(k)).sort();
    for (const line of got.slice(0, 6)) expect(fields(line)).toEqual(['method', 'mount', 'ms', 'operation', 'path', 'request_id', 'status']);
    expect(fields(got[6]!)).toEqual(['method', 'ms', 'path', 'request_id', 'status']);
    expect(fields(got[7]!)).toEqual(['method', 'ms', 'path', 'status']);
    for (const line of got) expect(line.ms).toEqual(expect.any(Number));
    for (const line of got.slice(0, 7)) expect(line.request_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    expect(logged).not.toContain('never-logged');
  });
});
