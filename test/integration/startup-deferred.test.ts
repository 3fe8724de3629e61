// Mounts whose backends start after the listener opens (createServer's `listenFirst`, as src/main.ts starts): every
// request, lease revocation and discovery document that needs such a backend waits for it and is then answered as it
// would have been; one that fails to start refuses its mount with 503 and the rest of the server serves on.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import type { BackendRegistry } from '../../src/core/core.ts';
import type { BackendFactory } from '../../src/core/framework.ts';
import { createServer, type Server } from '../../src/server.ts';
import { loadSettings } from '../../src/settings.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const cleanups: Array<() => Promise<unknown> | unknown> = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A fresh SQLite store, reopened by every server `start` makes. */
function store() {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-deferred-'));
  cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
  const settings = loadSettings({
    STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: 'root', STRONGROOM_STORAGE: `sqlite:${join(dir, 'strongroom.db')}`,
    STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64'), STRONGROOM_AUDIT_DIR: dir,
  }, []);
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, new Writable({ write: (chunk, _enc, done) => done(void lines.push(String(chunk))) }));
  const start = async (backend: BackendFactory, listenFirst: boolean) => {
    const backends: BackendRegistry = { secret: { probe: backend }, auth: {} };
    const server = await createServer(settings, logger, { backends, listenFirst });
    cleanups.push(() => server.close());
    await server.app.ready();
    return server;
  };
  return { start, lines };
}

async function request(server: Server, method: string, path: string, body?: unknown, token: string | null = 'root'): Promise<{ status: number; body: any }> {
  const res = await server.app.inject({
    method: method as 'GET', url: `/v1/${path}`, headers: { ...(token ? { 'x-vault-token': token } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
    payload: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.statusCode, body: res.body ? JSON.parse(res.body) : undefined };
}

/** The test backend, made only once `open` is called: a module still loading, as long as a test wants. */
function gated(probes: Map<string, TestBackendProbe>) {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  let made = 0;
  const factory: BackendFactory = async (ctx) => {
    await opened;
    made++;
    return testBackend(probes)(ctx);
  };
  return { factory, open, made: () => made };
}

/** Whether `p` has settled after the event loop has had every chance to settle it (the backend is held, not slow). */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true), () => (done = true));
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
  return done;
}

/** A store with a `probe/` mount holding `data/kept` and one lease (creds/held), written by a server started as before. */
async function storeWithMount() {
  const s = store();
  const probes = new Map<string, TestBackendProbe>();
  const first = await s.start(testBackend(probes), false);
  expect((await request(first, 'POST', 'sys/mounts/probe', { type: 'probe' })).status).toBe(204);
  expect((await request(first, 'POST', 'probe/data/kept', { value: 'v1', count: 7 })).status).toBe(204);
  const lease = (await request(first, 'GET', 'probe/creds/held')).body.lease_id as string;
  await first.close();
  cleanups.pop();
  return { ...s, lease };
}

describe('GET sys/health while a backend is starting', () => {
  it('"a 200 means the server serves": health answers at once, and a request for the starting mount is served once its backend runs', async () => {
    const s = await storeWithMount();
    const probes = new Map<string, TestBackendProbe>();
    const backend = gated(probes);
    const server = await s.start(backend.factory, true);
    expect((await request(server, 'GET', 'sys/health')).status).toBe(200);
    const read = request(server, 'GET', 'probe/data/kept');
    expect(await settled(read)).toBe(false);
    backend.open();
    expect(await read).toMatchObject({ status: 200, body: { data: { value: 'v1', count: 7 } } });
  });
});

describe('requests for a mount whose backend starts after the listener opens', () => {
  it('"a request waits for the backend, never a 404": reads and writes are answered as by a server started before it listened', async () => {
    const s = await storeWithMount();
    const backend = gated(new Map());
    const server = await s.start(backend.factory, true);
    const write = request(server, 'POST', 'probe/data/new', { value: 'v2' });
    const read = request(server, 'GET', 'probe/data/kept');
    expect(await settled(Promise.race([write, read]))).toBe(false);
    backend.open();
    expect((await write).status).toBe(204);
    expect(await read).toMatchObject({ status: 200, body: { data: { value: 'v1', count: 7 } } });
    expect(await request(server, 'GET', 'probe/data/new')).toMatchObject({ status: 200, body: { data: { value: 'v2' } } });
    // One backend for the mount, however many requests waited for it.
    await server.finishStart();
    expect(backend.made()).toBe(1);
  });

  it('"finishStart starts the backend without a request": its lease revocation then reaches the engine', async () => {
    const s = await storeWithMount();
    const probes = new Map<string, TestBackendProbe>();
    const backend = gated(probes);
    const server = await s.start(backend.factory, true);
    const finished = server.finishStart();
    backend.open();
    await finished;
    expect(backend.made()).toBe(1);
    expect((await request(server, 'POST', 'sys/leases/revoke', { lease_id: s.lease })).status).toBe(204);
    expect(probes.get('probe/')!.revoked).toEqual(['held']);
  });

  it('"a lease revoked before its backend runs waits for it": the engine\'s revoke runs, the lease is not failed or forgotten', async () => {
    const s = await storeWithMount();
    const probes = new Map<string, TestBackendProbe>();
    const backend = gated(probes);
    const server = await s.start(backend.factory, true);
    const revoke = request(server, 'POST', 'sys/leases/revoke', { lease_id: s.lease });
    expect(await settled(revoke)).toBe(false);
    backend.open();
    expect((await revoke).status).toBe(204);
    expect(probes.get('probe/')!.revoked).toEqual(['held']);
    expect((await request(server, 'POST', 'sys/leases/lookup', { lease_id: s.lease })).status).toBe(400);
  });

  it('"the OpenAPI document waits for the backend": the starting mount\'s paths are in it', async () => {
    const s = await storeWithMount();
    const backend = gated(new Map());
    const server = await s.start(backend.factory, true);
    const doc = request(server, 'GET', 'sys/internal/specs/openapi');
    backend.open();
    const paths = Object.keys((await doc).body.paths);
    expect(paths).toContain('/probe/data/{key}');
  });
});

describe('a mount whose backend fails to start', () => {
  const FAILURES: Array<[string, BackendFactory]> = [
    ['its module cannot be loaded', async () => { throw new Error('Cannot find module \'/app/src/engines/probe/index.ts\''); }],
    ['its factory throws', () => { throw new Error('the backend could not be built'); }],
    ['its initialize fails', (ctx) => ({ ...testBackend(new Map())(ctx) as object, paths: [], initialize: async () => { throw new Error('storage refused the read'); } })],
  ];

  it.each(FAILURES)('"fails closed": when %s, its requests are 503 (not 404, not served), the log names the mount, the rest serves', async (_case, factory) => {
    const s = await storeWithMount();
    const server = await s.start(factory, true);
    for (const [method, path] of [['GET', 'probe/data/kept'], ['POST', 'probe/data/other'], ['GET', 'probe/creds/new']] as const) {
      const r = await request(server, method, path, method === 'POST' ? { value: 'x' } : undefined);
      expect(r.status, `${method} ${path}`).toBe(503);
      expect(r.body.errors[0]).toContain('the backend of the mount "probe/" failed to start');
    }
    // Told only to a caller allowed there: without a token it is the 403 of any other path.
    expect((await request(server, 'GET', 'probe/data/kept', undefined, null)).status).toBe(403);
    // Its leases are not revoked as if the engine had done it: the revocation fails and the lease stays.
    expect((await request(server, 'POST', 'sys/leases/revoke', { lease_id: s.lease })).status).toBeGreaterThanOrEqual(400);
    expect((await request(server, 'POST', 'sys/leases/lookup', { lease_id: s.lease })).status).toBe(200);
    await server.finishStart();
    expect((await request(server, 'GET', 'sys/health')).status).toBe(200);
    expect((await request(server, 'GET', 'sys/mounts')).status).toBe(200);
    const failed = s.lines.map((l) => JSON.parse(l)).filter((l) => l.msg.startsWith('the backend of a mount failed to start'));
    expect(failed).toHaveLength(1);
    expect(failed[0]).toMatchObject({ mount: 'probe/', type: 'probe', level: 50 });
  });
});

describe('the engine types the server registers (src/lazy-engines.ts)', () => {
  it('"every type and alias engines.ts has": the server registers the same names without loading the engines', async () => {
    const { backendTypes } = await import('../../src/engines.ts');
    const { lazyBackends } = await import('../../src/lazy-engines.ts');
    const lazy = lazyBackends({ libraryMaxWaiters: 4 });
    for (const cls of ['secret', 'auth'] as const) expect(Object.keys(lazy[cls]).sort()).toEqual(Object.keys(backendTypes[cls]).sort());
    expect(lazy.aliases).toEqual(backendTypes.aliases);
  });
});
