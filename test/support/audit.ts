/** Helpers for audit device tests: a directory for logs, and a log read back as entries. */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'vitest';
import type { TestServer } from './server.ts';

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
