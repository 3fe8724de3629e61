// "A read of something that does not exist is 404 with a message, across engines; every error body carries at least
// one message" (docs/decisions.md). The table is every GET the server's own OpenAPI document lists, on every mount
// type, with each path parameter naming nothing.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;
let reads: Array<{ method: 'GET' | 'LIST'; path: string }> = [];

/**
 * GETs that are not a read of a named thing, with what they answer instead (each as Vault answers it): a lookup
 * needs a token to look up, and the UI's mount listing checks the caller's capabilities before it looks.
 */
const NOT_A_READ: Record<string, number> = {
  'sys/wrapping/lookup': 400,
  'sys/internal/ui/mounts/nosuch-x': 403,
};

beforeAll(async () => {
  s = await startTestServer({ listen: true });
  // Every mount type the server has is mounted by default (cloud/, ldap/, auth/cloud/, and the built-ins).
  expect(Object.keys((await s.request('GET', 'sys/mounts')).body.data)).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'identity/']));
  const doc = (await s.request('GET', 'sys/internal/specs/openapi')).body;
  reads = Object.entries<any>(doc.paths).filter(([, item]) => item.get).map(([template, item]) => ({
    method: item.get.parameters?.some((p: { name: string }) => p.name === 'list') ? 'LIST' : 'GET',
    path: template.slice(1).replace(/\{[^}]+\}/g, 'nosuch-x'),
  }));
});
afterAll(async () => {
  await s?.close();
});

describe('a read of something that does not exist', () => {
  it('"is 404 with a message": every read endpoint of every mount type, or 200 where there is always something', async () => {
    expect(reads.length).toBeGreaterThan(40);
    const wrong: string[] = [];
    for (const { method, path } of reads) {
      const r = await s.request(method, path);
      const expected = NOT_A_READ[path];
      if (r.status === 200 && expected === undefined) continue;
      if (r.status !== (expected ?? 404)) wrong.push(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
      else if (!Array.isArray(r.body?.errors) || r.body.errors.length === 0 || r.body.errors.some((e: unknown) => typeof e !== 'string' || e === '')) wrong.push(`${method} ${path}: no message ${JSON.stringify(r.body)}`);
    }
    expect(wrong).toEqual([]);
  });

  it.each([
    ['ldap/static-cred/nosuch-x', 'unknown role: nosuch-x'],
    ['ldap/role/nosuch-x', 'no value found at "ldap/role/nosuch-x"'],
    ['ldap/creds/nosuch-x', 'dynamic role "nosuch-x" not found'],
    ['ldap/library/nosuch-x/status', 'library set "nosuch-x" does not exist'],
    ['cloud/creds/nosuch-x', "role 'nosuch-x' does not exist"],
    ['sys/mounts/nosuch-x', 'no secrets engine is mounted at "nosuch-x/"'],
    ['sys/auth/nosuch-x/tune', 'no auth method is mounted at "nosuch-x/"'],
  ])('GET %s is a 404 saying "%s"', async (path, message) => {
    const r = await s.request('GET', path);
    expect(r.status).toBe(404);
    expect(r.body.errors).toEqual([message]);
  });

  it('"an empty list is a 404 with a message" (LIST ldap/role/)', async () => {
    const r = await s.request('LIST', 'ldap/role');
    expect(r).toMatchObject({ status: 404, body: { errors: ['no entries found at "ldap/role/"'] } });
  });
});

describe('every error body carries at least one message', () => {
  it.each([['/nope'], ['/v1'], ['/v2/sys/health']])('GET %s outside /v1/ is a 404 with a message', async (url) => {
    const res = await fetch(`${s.url}${url}`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({ errors: ['no handler for this route: every API path starts with /v1/'] });
  });

  it('LIST outside /v1/ (the LIST method\'s own code path) is a 404 with the same message', async () => {
    const answer = await rawExchange('LIST /nope HTTP/1.1\r\nHost: x\r\n\r\n');
    expect(answer.startsWith('HTTP/1.1 404 ')).toBe(true);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ errors: ['no handler for this route: every API path starts with /v1/'] });
  });

  it('an unknown route below /v1/ names it', async () => {
    const r = await s.request('GET', 'nosuch/path');
    expect(r).toMatchObject({ status: 404, body: { errors: ['no handler for route "nosuch/path". route entry not found.'] } });
  });

  it.each([
    ['an unknown HTTP method', 'FOO /v1/sys/mounts HTTP/1.1\r\nHost: x\r\n\r\n', 400, 'unsupported HTTP method'],
    ['a header line that is no header', 'GET /v1/sys/health HTTP/1.1\r\nHost: x\r\nnot a header\r\n\r\n', 400, 'malformed HTTP request'],
  ])('%s is a 400 with a JSON message, not an empty body', async (_name, raw, status, message) => {
    const answer = await rawExchange(raw);
    expect(answer.startsWith(`HTTP/1.1 ${status} `)).toBe(true);
    expect(answer).toMatch(/\r\nContent-Type: application\/json\r\n/);
    expect(JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4))).toEqual({ errors: [message] });
  });
});

/** Sends raw bytes and reads the answer until the server closes (these answers all close the connection). */
function rawExchange(raw: string): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    const url = new URL(s.url);
    const socket = connect(Number(url.port), url.hostname, () => socket.write(raw));
    let got = '';
    socket.on('data', (d) => (got += d.toString('latin1')));
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
    socket.setTimeout(5000, () => socket.destroy(new Error('no answer')));
  });
}
