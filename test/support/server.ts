import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../src/core/clock.ts';
import type { ClusterTimings } from '../../src/core/cluster.ts';
import type { BackendRegistry } from '../../src/core/core.ts';
import type { Storage } from '../../src/core/storage/types.ts';
import { createLogger } from '../../src/logger.ts';
import { createServer, type Server } from '../../src/server.ts';
import { loadSettings } from '../../src/settings.ts';

export interface TestServer extends Server {
  rootToken: string;
  /** Base URL when started with listen: true (real sockets on 127.0.0.1, port 0). */
  url: string;
  /** JSON request through app.inject; returns status and parsed body. */
  request(method: string, path: string, opts?: { body?: unknown; token?: string | null; headers?: Record<string, string> }): Promise<{ status: number; body: any; headers: Record<string, unknown> }>;
  dataDir: string;
}

export interface TestServerOptions {
  clock?: Clock;
  /** "memory" (default) or "sqlite" (a file in a fresh temp dir, or `dataDir` to reopen one). */
  storage?: 'memory' | 'sqlite';
  /** A PostgreSQL database (postgres.ts `createDatabase`) to store in instead; the server closes its pool. */
  postgresUrl?: string;
  dataDir?: string;
  unsealKey?: string;
  listen?: boolean;
  backends?: BackendRegistry;
  env?: Record<string, string>;
  storageInstance?: Storage;
  cluster?: Partial<ClusterTimings>;
}

/** A fresh server per test file: its own storage, root token "root", quiet logs. */
export async function startTestServer(opts: TestServerOptions = {}): Promise<TestServer> {
  const dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'strongroom-test-'));
  const unsealKey = opts.unsealKey ?? randomBytes(32).toString('base64');
  const settings = loadSettings({
    STRONGROOM_DEV: '1',
    STRONGROOM_DEV_ROOT_TOKEN: 'root',
    STRONGROOM_STORAGE: opts.postgresUrl ?? (opts.storage === 'sqlite' ? `sqlite:${join(dataDir, 'strongroom.db')}` : 'memory'),
    STRONGROOM_UNSEAL_KEY: unsealKey,
    STRONGROOM_LOG_LEVEL: process.env.STRONGROOM_TEST_LOG_LEVEL ?? 'silent',
    // Audit tests keep their logs in directories of their own under it (audit.ts `auditDir`).
    STRONGROOM_AUDIT_DIR: tmpdir(),
    ...opts.env,
  }, []);
  const server = await createServer(settings, createLogger(settings.STRONGROOM_LOG_LEVEL), { clock: opts.clock, backends: opts.backends, storage: opts.storageInstance, cluster: opts.cluster });
  let url = '';
  if (opts.listen) url = await server.app.listen({ host: '127.0.0.1', port: 0 });
  else await server.app.ready();
  return {
    ...server,
    rootToken: server.rootToken ?? 'root',
    url,
    dataDir,
    async request(method, path, { body, token = 'root', headers = {} } = {}) {
      // light-my-request cannot send LIST; ?list=true is the same operation (real LIST is tested over sockets).
      const isList = method.toUpperCase() === 'LIST';
      const url = `/v1/${path.replace(/^\//, '')}`;
      const res = await server.app.inject({
        method: (isList ? 'GET' : method) as 'GET',
        url: isList ? `${url}${url.includes('?') ? '&' : '?'}list=true` : url,
        headers: { ...(token ? { 'x-service-token': token } : {}), ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
        payload: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
      });
      let parsed: unknown = undefined;
      try {
        parsed = res.body ? JSON.parse(res.body) : undefined;
      } catch {
        parsed = res.body;
      }
      return { status: res.statusCode, body: parsed, headers: res.headers };
    },
    async close() {
      await server.close();
      if (!opts.dataDir) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * The servers and data directories one test file starts: `start` and `dataDir` keep them, `closeAll` (the file's
 * afterEach, or a test's finally) closes every server and removes every directory.
 */
export function testServers() {
  const servers: TestServer[] = [];
  const dirs: string[] = [];
  return {
    async start(opts: TestServerOptions = {}): Promise<TestServer> {
      const s = await startTestServer(opts);
      servers.push(s);
      return s;
    },
    dataDir(prefix = 'strongroom-test-'): string {
      const dir = mkdtempSync(join(tmpdir(), prefix));
      dirs.push(dir);
      return dir;
    },
    async closeAll(): Promise<void> {
      for (const s of servers.splice(0)) await s.close().catch(() => undefined);
      for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    },
  };
}
