/** Event subscribers for tests: a real WebSocket client (the `ws` package) on Vault's subscribe endpoint. */
import { randomBytes } from 'node:crypto';
import { afterEach } from 'vitest';
import WebSocket from 'ws';
import type { ClusterTimings } from '../../src/core/cluster.ts';
import { createDatabase, type PostgresFacts } from './postgres.ts';
import { startTestServer, type TestServer, type TestServerOptions } from './server.ts';

export interface Received {
  events: any[];
  raw: string[];
  closed: Promise<{ code: number; reason: string }>;
  ws: WebSocket;
}

/**
 * Subscribes with a real WebSocket client (resolving once the server accepted the upgrade, or rejecting with its HTTP
 * status and body); each socket is added to `sockets`, for the test to terminate.
 */
export const subscriber = (baseUrl: string, sockets: WebSocket[]) => (eventType: string, token: string, query: Record<string, string> = {}): Promise<Received> => {
  const params = new URLSearchParams({ json: 'true', ...query });
  const ws = new WebSocket(`${baseUrl.replace(/^http/, 'ws')}/v1/sys/events/subscribe/${eventType}?${params}`, { headers: { 'X-Vault-Token': token } });
  sockets.push(ws);
  const received: Received = { events: [], raw: [], ws, closed: new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() }))) };
  ws.on('message', (data) => {
    received.raw.push(data.toString());
    received.events.push(JSON.parse(data.toString()));
  });
  return new Promise((resolve, reject) => {
    ws.on('open', () => resolve(received));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c) => (body += c));
      res.on('end', () => reject(Object.assign(new Error(`HTTP ${res.statusCode}`), { status: res.statusCode, body })));
    });
    ws.on('error', reject);
  });
};

/** Waits (bounded) until `check` holds. */
export async function until(check: () => boolean, what: string, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !check(); ) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}


const CLUSTER_TIMINGS: Partial<ClusterTimings> = { leaseTtlMs: 1500, renewMs: 200, pollMs: 100, heartbeatMs: 300, deadAfterMs: 2000 };
type Closers = Array<() => Promise<unknown>>;
type NodeOptions = Pick<TestServerOptions, 'backends' | 'env'>;

/** Where events are produced and where they are subscribed to: one SQLite node (the same server twice). */
export async function oneSqliteNode(closers: Closers, opts: NodeOptions = {}): Promise<[TestServer, TestServer]> {
  const s = await startTestServer({ storage: 'sqlite', listen: true, ...opts });
  closers.push(() => s.close());
  return [s, s];
}

/** Two nodes of a PostgreSQL cluster on a fresh database: events produced on the first are read on the second. */
export async function twoPostgresNodes(postgres: Pick<PostgresFacts, 'adminUrl' | 'host' | 'port' | 'user'>, closers: Closers, opts: NodeOptions = {}): Promise<[TestServer, TestServer]> {
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  const unsealKey = randomBytes(32).toString('base64');
  const start = async () => {
    const s = await startTestServer({ postgresUrl: db.url, unsealKey, cluster: CLUSTER_TIMINGS, listen: true, ...opts });
    closers.push(() => s.close());
    return s;
  };
  const first = await start();
  return [first, await start()];
}

/**
 * The frame the event-type tests share: what a test opens goes into `closers` and `sockets`, released after each test;
 * `topologies` is the `describe.each` table of where events are produced and subscribed to (one SQLite node; two
 * PostgreSQL nodes, produced on the first and subscribed on the second).
 */
export function eventTopologies(postgres: Pick<PostgresFacts, 'adminUrl' | 'host' | 'port' | 'user'>) {
  const closers: Closers = [];
  const sockets: WebSocket[] = [];
  afterEach(async () => {
    for (const ws of sockets.splice(0)) ws.terminate();
    while (closers.length) await closers.pop()!().catch(() => undefined);
  });
  const topologies: Array<[string, () => Promise<[TestServer, TestServer]>]> = [
    ['SQLite, one node', () => oneSqliteNode(closers)],
    ['PostgreSQL, two nodes: produced on one, subscribed on the other', () => twoPostgresNodes(postgres, closers)],
  ];
  return { closers, sockets, topologies };
}
