import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { connect } from 'node:net';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

// Counts body parses: a refused body must never reach the parser.
const parsed = vi.hoisted(() => ({ count: 0 }));
vi.mock('../../src/http/body.ts', async (original) => {
  const real = await original<typeof import('../../src/http/body.ts')>();
  return { ...real, parseBody: (raw: string) => (parsed.count++, real.parseBody(raw)) };
});

const MiB = 1024 * 1024;

interface Exchange { status: number; body: string; closed: boolean; ms: number }

/**
 * One request over a raw socket: `head` (request line and headers), then `chunks` one per turn (or `gapMs` apart)
 * until the server answers or closes. Resolves once the answer is complete and the connection is kept, when the
 * server closes it, or `waitMs` after the first byte of the answer. `ms` is the time until the answer or the close.
 */
function exchange(url: string, head: string, chunks: Buffer[] = [], { waitMs = 2000, gapMs = 0 } = {}): Promise<Exchange> {
  const { hostname, port } = new URL(url);
  const started = performance.now();
  return new Promise((resolve) => {
    const socket = connect(Number(port), hostname);
    let received = '';
    let answeredAt: number | undefined;
    const finish = (closed: boolean) => {
      socket.destroy();
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(received)?.[1] ?? 0);
      resolve({ status, body: received.slice(received.indexOf('\r\n\r\n') + 4), closed, ms: (answeredAt ?? performance.now()) - started });
    };
    socket.on('data', (d) => {
      received += d.toString('latin1');
      if (answeredAt === undefined) {
        answeredAt = performance.now();
        setTimeout(() => finish(false), waitMs);
      }
      const end = received.indexOf('\r\n\r\n');
      const length = Number(/\r\ncontent-length: (\d+)/i.exec(received)?.[1] ?? 0);
      if (end >= 0 && received.length - end - 4 >= length && !/\r\nconnection: close/i.test(received)) finish(false);
    });
    socket.on('error', () => undefined);
    socket.on('close', () => finish(true));
    socket.write(head);
    void (async () => {
      for (const chunk of chunks) {
        if (answeredAt !== undefined || socket.destroyed) return;
        socket.write(chunk);
        await new Promise((r) => (gapMs ? setTimeout(r, gapMs) : setImmediate(r)));
      }
    })();
  });
}

/** A JSON object of exactly `size` bytes: {"value":"v","pad":"xxx…"} (fields are capped far below a body). */
const json = (size: number) => `{"value":"v","pad":"${'x'.repeat(size - 22)}"}`;
const post = (path: string, headers: Record<string, string>) =>
  `POST /v1/${path} HTTP/1.1\r\nHost: strongroom\r\nContent-Type: application/json\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
/** A JSON body of `size` bytes, cut into HTTP/1.1 chunks of 64 KiB; without the closing chunk unless `end`. */
function chunked(size: number, end = false): Buffer[] {
  const body = Buffer.from(json(size));
  const out: Buffer[] = [];
  for (let at = 0; at < body.length; at += 64 * 1024) {
    const part = body.subarray(at, at + 64 * 1024);
    out.push(Buffer.concat([Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')]));
  }
  if (end) out.push(Buffer.from('0\r\n\r\n'));
  return out;
}

describe('request bodies are bounded before they are parsed', () => {
  let s: TestServer;
  let valid: string;
  let revoked: string;
  beforeAll(async () => {
    // The anonymous limit keeps its 1 MiB default; a valid token may send up to 4 MiB here.
    s = await startTestServer({ listen: true, backends: { secret: { test: testBackend(new Map<string, TestBackendProbe>()) }, auth: {} }, env: { STRONGROOM_MAX_REQUEST_SIZE: String(4 * MiB) } });
    await s.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
    valid = (await s.request('POST', 'auth/token/create', { body: { policies: ['root'] } })).body.auth.client_token;
    revoked = (await s.request('POST', 'auth/token/create', { body: { policies: ['root'] } })).body.auth.client_token;
    expect((await s.request('POST', 'auth/token/revoke', { body: { token: revoked } })).status).toBe(204);
  });
  afterAll(() => s.close());
  beforeEach(() => {
    parsed.count = 0;
  });

  it.each([
    ['no token', {}],
    ['a token the server never issued', { 'X-Vault-Token': 'hvs.not-a-token' }],
    ['a revoked token', { 'X-Service-Token': '<revoked>' }],
    ['an empty bearer token', { Authorization: 'Bearer ' }],
  ])('"a Content-Length over 1 MiB with %s is 413 before the body is read: the answer comes with no body sent, the connection closes, the parser never runs"', async (_who, headers) => {
    const h = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, v === '<revoked>' ? revoked : v]));
    const r = await exchange(s.url, post('kv/data/big', { ...h, 'Content-Length': String(2 * MiB) }));
    expect(r.status).toBe(413);
    expect(JSON.parse(r.body)).toEqual({ errors: [`request body exceeds the limit of ${MiB} bytes`] });
    expect(r.closed).toBe(true);
    expect(parsed.count).toBe(0);
  });

  it('"a chunked body without Content-Length is 413 once it passes 1 MiB without a valid token, and is never parsed"', async () => {
    for (const headers of [{}, { 'X-Vault-Token': 'hvs.not-a-token' }] as Array<Record<string, string>>) {
      const sent = chunked(3 * MiB);
      const r = await exchange(s.url, post('kv/data/big', { ...headers, 'Transfer-Encoding': 'chunked' }), sent);
      expect(r.status).toBe(413);
      expect(r.closed).toBe(true);
    }
    expect(parsed.count).toBe(0);
  });

  it('"an anonymous body within 1 MiB is read and parsed as usual, chunked or not (the core then refuses it: 403)"', async () => {
    expect((await exchange(s.url, post('kv/data/small', { 'Content-Length': String(MiB) }) + json(MiB))).status).toBe(403);
    expect((await exchange(s.url, post('kv/data/small', { 'Transfer-Encoding': 'chunked' }), chunked(MiB, true))).status).toBe(403);
    expect(parsed.count).toBe(2);
  });

  it('"a valid token may send 2 MiB, declared or chunked"', async () => {
    const declared = await fetch(`${s.url}/v1/kv/data/two`, { method: 'POST', headers: { 'x-vault-token': valid, 'content-type': 'application/json' }, body: json(2 * MiB) });
    // Parsed in full: the core names the padding field it ignored.
    expect(declared.status).toBe(200);
    expect(((await declared.json()) as { warnings: string[] }).warnings).toEqual(['Endpoint ignored these unrecognized parameters: [pad]']);
    const streamed = await exchange(s.url, post('kv/data/three', { 'X-Vault-Token': valid, 'Transfer-Encoding': 'chunked' }), chunked(2 * MiB, true));
    expect(streamed.status).toBe(200);
    expect((await s.request('GET', 'kv/data/three')).body.data.value).toBe('v');
    expect(parsed.count).toBe(2);
  });

  it('"a valid token is still held to STRONGROOM_MAX_REQUEST_SIZE, declared or chunked"', async () => {
    const declared = await exchange(s.url, post('kv/data/huge', { 'X-Vault-Token': valid, 'Content-Length': String(5 * MiB) }));
    expect(declared.status).toBe(413);
    expect(JSON.parse(declared.body)).toEqual({ errors: [`request body exceeds the limit of ${4 * MiB} bytes`] });
    const streamed = await exchange(s.url, post('kv/data/huge', { 'X-Vault-Token': valid, 'Transfer-Encoding': 'chunked' }), chunked(5 * MiB));
    expect(streamed.status).toBe(413);
    expect(parsed.count).toBe(0);
  });
});

describe('slow clients are disconnected', () => {
  // Headers within 1 s, the whole request within 2 s, idle keep-alive 1 s. Node checks them every second, so a
  // connection goes between its bound and a second later (measured: 1.0 s past it, every time).
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer({ listen: true, env: { STRONGROOM_HEADERS_TIMEOUT: '1s', STRONGROOM_REQUEST_TIMEOUT: '2s', STRONGROOM_KEEP_ALIVE_TIMEOUT: '1s' } });
  });
  afterAll(() => s.close());
  const within = (r: Exchange, bound: number) => {
    expect(r.ms).toBeGreaterThanOrEqual(bound * 1000 - 100);
    expect(r.ms).toBeLessThan(bound * 1000 + 2000);
  };

  it('"a body that stops short of its Content-Length is answered 408 and closed within the request timeout"', async () => {
    const r = await exchange(s.url, post('sys/x', { 'Content-Length': '1000' }), [Buffer.from('{')], { waitMs: 5000 });
    expect(r.status).toBe(408);
    expect(r.closed).toBe(true);
    within(r, 2);
  });

  it('"a body dribbled a byte at a time is cut at the request timeout although the connection is never idle"', async () => {
    const r = await exchange(s.url, post('sys/x', { 'Content-Length': '1000' }), Array.from({ length: 1000 }, () => Buffer.from(' ')), { waitMs: 5000, gapMs: 100 });
    expect(r.status).toBe(408);
    expect(r.closed).toBe(true);
    within(r, 2);
  });

  it('"headers that never end are cut at the headers timeout; a connection that sends nothing too"', async () => {
    const slow = await exchange(s.url, 'GET /v1/sys/health HTTP/1.1\r\nHost: x\r\n', Array.from({ length: 100 }, (_, i) => Buffer.from(`X-Pad-${i}: y\r\n`)), { waitMs: 5000, gapMs: 100 });
    expect(slow.closed).toBe(true);
    within(slow, 1);
    const silent = await exchange(s.url, '', [], { waitMs: 5000 });
    expect(silent.closed).toBe(true);
    within(silent, 1);
  });

  it('"an idle keep-alive connection is closed after the keep-alive timeout"', async () => {
    const { hostname, port } = new URL(s.url);
    const idle = await new Promise<{ answer: string; ms: number }>((resolve) => {
      let answer = '';
      let answeredAt = 0;
      const socket = connect(Number(port), hostname, () => socket.write('GET /v1/sys/health HTTP/1.1\r\nHost: x\r\n\r\n'));
      socket.on('data', (d) => {
        answer += d;
        answeredAt ||= performance.now();
      });
      socket.on('close', () => resolve({ answer, ms: performance.now() - answeredAt }));
    });
    expect(idle.answer).toMatch(/^HTTP\/1\.1 200 .*\r\nconnection: keep-alive\r\n/is);
    expect(idle.ms).toBeGreaterThanOrEqual(900);
    expect(idle.ms).toBeLessThan(3000);
  });

  it('"a request that arrives in time is served as usual"', async () => {
    const r = await exchange(s.url, post('sys/x', { 'Content-Length': '2' }), [Buffer.from('{'), Buffer.from('}')], { gapMs: 500 });
    expect(r.status).toBe(403);
  });
});
