/** Helpers for audit device tests: a directory for logs, and a log read back as entries. */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { TestServer } from './server.ts';
import { freePort } from './ports.ts';

export interface AuditEntry {
  time: string;
  type: 'request' | 'response';
  auth: Record<string, any>;
  request: Record<string, any> & { id: string; path: string; operation: string; data?: Record<string, any> };
  response?: Record<string, any>;
  error?: string;
}

/** A directory removed by the returned cleanup. */
export function auditDir(): { dir: string; file: (name?: string) => string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-audit-'));
  return { dir, file: (name = 'audit.log') => join(dir, name), cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export function readEntries(file: string): AuditEntry[] {
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as AuditEntry);
}

/** The request and response entries of the request with this id, in order. */
export function entriesOf(entries: AuditEntry[], requestId: string): AuditEntry[] {
  return entries.filter((e) => e.request.id === requestId);
}

/** Entries whose request path and operation match, in log order. */
export function entriesAt(entries: AuditEntry[], path: string, operation?: string): AuditEntry[] {
  return entries.filter((e) => e.request.path === path && (!operation || e.request.operation === operation));
}

export async function enableFile(s: TestServer, path: string, file: string, options: Record<string, unknown> = {}, token = 'root'): Promise<void> {
  const r = await s.request('PUT', `sys/audit/${path}`, { body: { type: 'file', options: { file_path: file, ...options } }, token });
  expect(r.status, JSON.stringify(r.body)).toBe(204);
}

export async function auditHash(s: TestServer, device: string, input: string, token = 'root'): Promise<string> {
  const r = await s.request('POST', `sys/audit-hash/${device}`, { body: { input }, token });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.data.hash as string;
}

export interface Collector {
  /** host:port for tcp, a socket path for unix. */
  address: string;
  lines: string[];
  /** Stops listening and cuts every connection, as a collector that died. */
  kill(): Promise<void>;
  /** Listens again at the same address. */
  revive(): Promise<void>;
  /** Stops reading what connections send (a stuck collector), so the sender's buffers fill. */
  stall(): void;
}

/** A log collector: a TCP (or Unix socket, given a path) listener that keeps each line it receives. */
export async function startCollector(unixPath?: string): Promise<Collector> {
  const lines: string[] = [];
  const sockets = new Set<Socket>();
  let stalled = false;
  const listen = async () => {
    const server = createServer((c) => {
      sockets.add(c);
      c.on('close', () => sockets.delete(c));
      if (stalled) c.pause();
      let buf = '';
      c.on('data', (d) => {
        buf += d;
        const parts = buf.split('\n');
        buf = parts.pop()!;
        lines.push(...parts);
      });
    });
    await new Promise<void>((r) => (unixPath ? server.listen(unixPath, r) : server.listen(port, '127.0.0.1', r)));
    return server;
  };
  // Not port 0: one the system hands out could, while the collector is killed, become another process's listener or
  // connection, and revive() would fail (freePort's ports lie below that range).
  const port = unixPath ? 0 : await freePort();
  let server = await listen();
  return {
    address: unixPath ?? `127.0.0.1:${port}`,
    lines,
    async kill() {
      for (const c of sockets) c.destroy();
      await new Promise((r) => server.close(r));
    },
    async revive() {
      server = await listen();
    },
    stall() {
      stalled = true;
      for (const c of sockets) c.pause();
    },
  };
}
