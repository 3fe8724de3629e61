import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Worker } from 'node:worker_threads';
import { freePort } from '../support/ports.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';
import { captureSqliteWriters } from '../support/writer-capture.ts';

const curl = async (args: string[]) => (await promisify(execFile)('curl', args, { encoding: 'utf8' })).stdout;
const backends = { secret: { test: testBackend(new Map<string, TestBackendProbe>()) }, auth: {} };

let s: TestServer;
let writer: Worker;
let token: string;
beforeEach(async () => {
  const capture = captureSqliteWriters();
  try {
    s = await startTestServer({ storage: 'sqlite', listen: true, backends });
  } finally {
    capture.restore();
  }
  expect(capture.writers).toHaveLength(1);
  writer = capture.writers[0];
  await s.request('POST', 'sys/mounts/kv', { body: { type: 'test' } });
  await s.request('POST', 'kv/data/a', { body: { value: 'before' } });
  await s.request('PUT', 'sys/policies/acl/reader', { body: { policy: 'path "kv/*" { capabilities = ["read", "list"] }' } });
  token = (await s.request('POST', 'auth/token/create', { body: { policies: ['reader'] } })).body.auth.client_token;
});
afterEach(() => s.close().catch(() => undefined));

/** Kills the writer as a crash would and waits until the store has noticed. */
async function killWriter(): Promise<void> {
  await writer.terminate();
  await expect.poll(() => s.storage.failure).toBeDefined();
}

const unavailable = { errors: [expect.stringMatching(/^storage is unavailable: the SQLite writer thread exited/)] };

describe('a store whose writer thread died', () => {
  it('"the store reports its failure: the failure is set, onFailure listeners hear it once, writes are refused"', async () => {
    const heard: Error[] = [];
    s.storage.onFailure((err) => heard.push(err));
    await killWriter();
    expect(heard).toEqual([s.storage.failure]);
    const late: Error[] = [];
    s.storage.onFailure((err) => late.push(err));
    expect(late).toEqual([s.storage.failure]);
    await expect(s.storage.put('x', Buffer.from('y'))).rejects.toThrow(/writer thread exited/);
  });

  it('"sys/health answers 503 with its usual fields"', async () => {
    expect((await s.request('GET', 'sys/health', { token: null })).status).toBe(200);
    await killWriter();
    for (const url of ['sys/health', 'sys/health?standbyok=true']) {
      const r = await s.request('GET', url, { token: null });
      expect(r.status).toBe(503);
      expect(r.body).toMatchObject({ initialized: true, sealed: false, standby: false, version: expect.any(String) });
    }
  });

  it('"every other request is 503 storage is unavailable before any handler runs: reads, writes, unauthenticated, unknown paths"', async () => {
    await killWriter();
    const cases: Array<[string, string, { body?: unknown; token?: string | null }]> = [
      ['PUT', 'sys/policies/acl/later', { body: { policy: 'path "x" { capabilities = ["read"] }' } }],
      ['GET', 'kv/data/a', { token }],
      ['GET', 'kv/data/a', {}],
      ['GET', 'sys/seal-status', { token: null }],
      ['GET', 'sys/mounts', { token: null }],
      ['POST', 'auth/token/create', { body: {} }],
      ['GET', 'no/such/mount', {}],
    ];
    for (const [method, path, opts] of cases) {
      const r = await s.request(method, path, opts);
      expect({ method, path, status: r.status, body: r.body }).toEqual({ method, path, status: 503, body: unavailable });
    }
  });

  it('"a LIST answered from the raw packet is 503 too"', async () => {
    await killWriter();
    const out = await curl(['-s', '-X', 'LIST', '-H', `X-Vault-Token: ${token}`, '-w', '\n%{http_code}', `${s.url}/v1/kv/data`]);
    const [body, code] = out.trimEnd().split('\n');
    expect(code).toBe('503');
    expect(JSON.parse(body)).toEqual(unavailable);
  });

  it('"a token whose revocation could not land never answers 200"', async () => {
    expect((await s.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
    const revoke = s.request('POST', 'auth/token/revoke', { body: { token } });
    await killWriter();
    expect((await revoke).status).toBeGreaterThanOrEqual(500);
    for (const [method, path] of [['GET', 'auth/token/lookup-self'], ['GET', 'kv/data/a'], ['POST', 'auth/token/renew-self'], ['LIST', 'kv/data']]) {
      expect({ path, status: (await s.request(method, path, { token })).status }).toEqual({ path, status: 503 });
    }
    expect((await s.request('POST', 'auth/token/revoke', { body: { token } })).status).toBe(503);
  });

  it('"a memory store never reports a failure"', async () => {
    const m = await startTestServer({ backends });
    try {
      expect(m.storage.failure).toBeUndefined();
      expect((await m.request('GET', 'sys/health', { token: null })).status).toBe(200);
    } finally {
      await m.close();
    }
  });
});

describe('the server process on a storage failure', () => {
  it('"logs one fatal line without secrets and exits with code 4 after a short grace, answering 503 meanwhile"', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'strongroom-fail-'));
    const unsealKey = randomBytes(32).toString('base64');
    const port = await freePort();
    const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', '--import', './test/support/kill-writer-on-signal.ts', 'src/main.ts'], {
      env: { ...process.env, STRONGROOM_STORAGE: `sqlite:${join(dir, 'strongroom.db')}`, STRONGROOM_UNSEAL_KEY: unsealKey, STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_LOG_LEVEL: 'info' },
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await expect.poll(() => out, { timeout: 15_000 }).toMatch(/strongroom listening/);
      const rootToken = /Root token[^\n]*\n\n\s+(\S+)/.exec(out)![1];
      const health = async () => Number(await curl(['-s', '-o', '/dev/null', '-w', '%{http_code}', `http://127.0.0.1:${port}/v1/sys/health`]));
      expect(await health()).toBe(200);
      const killedAt = Date.now();
      child.kill('SIGUSR2');
      await expect.poll(health).toBe(503);
      expect(await exited).toBe(4);
      const elapsed = Date.now() - killedAt;
      expect(elapsed).toBeGreaterThanOrEqual(1500);
      expect(elapsed).toBeLessThan(10_000);
      const fatal = out.split('\n').filter((line) => line.includes('"level":60'));
      expect(fatal).toHaveLength(1);
      expect(fatal[0]).toMatch(/storage failed/);
      expect(fatal[0]).toMatch(/writer thread exited/);
      expect(out.split(rootToken)).toHaveLength(2);
      expect(out).not.toContain(unsealKey);
    } finally {
      child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
