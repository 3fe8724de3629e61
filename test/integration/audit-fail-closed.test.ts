// Fail closed (docs/audit.md): with a device enabled, a request whose request entry no device could write is
// refused before its handler runs, and a response entry no device could write turns the answer into a 500 (the
// handler's effects stay). One device that writes is enough. Failures are visible (a warning, a count per device).
// File targets that fail (a file that cannot be opened again after SIGHUP), socket collectors that die
// or stop reading, and log rotation by SIGHUP under load in a real server process.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { field } from '../../src/core/fields.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';
import { auditDir, enableFile, entriesAt, entriesOf, readEntries, startCollector, type Collector } from '../support/audit.ts';
import { freePort } from '../support/ports.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend } from '../support/test-backend.ts';

const FAILURE = 'audit log failure: no audit device could record the request, so it was not run';
const RESPONSE_FAILURE = 'audit log failure: no audit device could record the response; the request took effect but its answer is withheld';

/** An engine whose write stores its value and then waits for the test, so a device can break between the two entries. */
const gate = { entered: () => {}, release: Promise.resolve() };
const gatedBackend: BackendFactory = (ctx) => ({
  paths: [definePath({
    pattern: 'item',
    fields: { value: field.string('Stored before the handler waits.') },
    description: 'Stores, then waits for the test.',
    operations: {
      update: async (req) => {
        await ctx.storage.putJson('item', { value: req.data.value });
        gate.entered();
        await gate.release;
      },
    },
  })],
});

const logs = auditDir();
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ backends: { secret: { test: testBackend(new Map()), gated: gatedBackend }, auth: {} } });
  expect((await s.request('POST', 'sys/mounts/kv', { body: { type: 'test' } })).status).toBe(204);
  expect((await s.request('POST', 'sys/mounts/gated', { body: { type: 'gated' } })).status).toBe(204);
});
afterEach(async () => {
  vi.restoreAllMocks();
  // Through the core: with a failing device the API refuses this too, which is the point.
  for (const { path } of s.core.audit.list()) await s.core.audit.disable(path);
});
afterAll(async () => {
  await s?.close();
  logs.cleanup();
});

/**
 * A file device whose every write fails from now on: its directory moved away by rotation and a file put in its
 * place, then SIGHUP (ENOTDIR). Devices write only regular files inside the audit directory, so /dev/full is out.
 */
async function failingFile(path: string): Promise<void> {
  const dir = join(logs.dir, `failing-${path}-${randomBytes(4).toString('hex')}`);
  mkdirSync(dir);
  await enableFile(s, path, join(dir, 'audit.log'));
  renameSync(dir, `${dir}.old`);
  writeFileSync(dir, 'not a directory');
  await s.core.audit.reopen();
}

/** What kv/ holds at `key`, read past the API (which a failing device keeps closed). */
async function stored(key: string): Promise<unknown> {
  const raw = await s.core.barrier.get(`logical/${s.core.mounts.get('kv/')!.uuid}/data/${key}`);
  return raw && JSON.parse(raw.toString());
}

describe('fail closed: the request entry', () => {
  it('"a request whose request entry no device could write is refused with 500, and its handler never runs"', async () => {
    await failingFile('full');
    const r = await s.request('POST', 'kv/data/refused', { body: { value: 'never stored' } });
    expect(r).toMatchObject({ status: 500, body: { errors: [FAILURE] } });
    expect(await stored('refused')).toBeUndefined();
    expect((await s.request('GET', 'sys/audit')).status, 'sys/audit itself is refused').toBe(500);
    expect(s.core.audit.failures()['full/']).toEqual({ type: 'file', request: 2, response: 0 });
  });

  it('"a failing device is visible": a warning naming the device and the reason, never the entry; at most one per interval, with the count', async () => {
    await failingFile('visible');
    const warn = vi.spyOn(s.core.logger, 'warn');
    for (let i = 0; i < 3; i++) await s.request('POST', 'kv/data/visible', { body: { value: 'a value the log must not see' } });
    expect(warn).toHaveBeenCalledTimes(1);
    const [fields, message] = warn.mock.calls[0] as unknown as [Record<string, unknown>, string];
    expect(message).toBe('audit device could not write an entry');
    expect(fields).toEqual({ audit_device: 'visible/', type: 'file', entry: 'request', reason: 'ENOTDIR: not a directory', failed_writes: 1 });
    expect(JSON.stringify(warn.mock.calls)).not.toContain('a value the log must not see');
  });

  it('"a file that cannot be opened again after SIGHUP refuses requests until it can"; then the device writes again by itself', async () => {
    const dir = join(logs.dir, 'rotating');
    mkdirSync(dir);
    const file = join(dir, 'audit.log');
    await enableFile(s, 'rotating', file);
    // Rotation moved the directory away and something else took its name: the file cannot be opened (ENOTDIR).
    renameSync(dir, `${dir}.old`);
    writeFileSync(dir, 'not a directory');
    await s.core.audit.reopen();
    const refused = await s.request('POST', 'kv/data/rotating', { body: { value: 'v' } });
    expect(refused).toMatchObject({ status: 500, body: { errors: [FAILURE] } });
    expect(await stored('rotating')).toBeUndefined();
    rmSync(dir);
    mkdirSync(dir);
    const info = vi.spyOn(s.core.logger, 'info');
    const written = await s.request('POST', 'kv/data/rotating', { body: { value: 'v' } });
    expect(written.status).toBe(204);
    expect(await stored('rotating')).toEqual({ value: 'v' });
    expect(entriesAt(readEntries(file), 'kv/data/rotating').map((e) => e.type)).toEqual(['request', 'response']);
    expect(info).toHaveBeenCalledWith(expect.objectContaining({ audit_device: 'rotating/' }), 'audit device writes entries again');
  });
});

describe('fail closed: the response entry', () => {
  it('"a response entry no device could write fails the response with 500; the handler\'s effects stay"', async () => {
    const dir = join(logs.dir, 'response');
    mkdirSync(dir);
    await enableFile(s, 'response', join(dir, 'audit.log'));
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    let release!: () => void;
    gate.entered = entered;
    gate.release = new Promise((r) => (release = r));
    const answer = s.request('POST', 'gated/item', { body: { value: 'stored anyway' } });
    await inHandler;
    // Between the request entry and the response entry the device loses its file.
    renameSync(dir, `${dir}.old`);
    writeFileSync(dir, 'not a directory');
    await s.core.audit.reopen();
    release();
    expect(await answer).toMatchObject({ status: 500, body: { errors: [RESPONSE_FAILURE] } });
    const raw = await s.core.barrier.get(`logical/${s.core.mounts.get('gated/')!.uuid}/item`);
    expect(JSON.parse(raw!.toString())).toEqual({ value: 'stored anyway' });
    expect(entriesAt(readEntries(join(`${dir}.old`, 'audit.log')), 'gated/item').map((e) => e.type)).toEqual(['request']);
    expect(s.core.audit.failures()['response/']).toEqual({ type: 'file', request: 0, response: 1 });
  });
});

describe('several devices', () => {
  it('"with two devices, one that writes is enough": requests succeed while one fails, and only the failing one counts failures', async () => {
    const file = logs.file('carrier.log');
    await enableFile(s, 'carrier', file);
    await failingFile('full');
    const before = s.core.audit.failures()['full/'];
    const r = await s.request('POST', 'kv/data/carried', { body: { value: 'v' } });
    expect(r.status).toBe(204);
    expect(await stored('carried')).toEqual({ value: 'v' });
    expect(entriesAt(readEntries(file), 'kv/data/carried').map((e) => e.type)).toEqual(['request', 'response']);
    const after = s.core.audit.failures();
    expect(after['full/']).toEqual({ type: 'file', request: before.request + 1, response: before.response + 1 });
    expect(after['carrier/']).toEqual({ type: 'file', request: 0, response: 0 });
  });
});

describe('socket devices', () => {
  const collectors: Collector[] = [];
  afterEach(async () => {
    while (collectors.length) await collectors.pop()!.kill().catch(() => undefined);
  });
  const collector = async (unix?: string) => {
    const c = await startCollector(unix);
    collectors.push(c);
    return c;
  };
  const enableSocket = async (path: string, c: Collector, type: 'tcp' | 'unix', options: Record<string, unknown> = {}) => {
    const r = await s.request('PUT', `sys/audit/${path}`, { body: { type: 'socket', options: { address: c.address, socket_type: type, ...options } } });
    expect(r.status, JSON.stringify(r.body)).toBe(204);
  };
  /** The device notices a dead collector by the connection closing; give that event its turn. */
  const noticed = () => new Promise((r) => setTimeout(r, 50));

  for (const type of ['tcp', 'unix'] as const) {
    it(`"${type}: every entry reaches the collector as a line; the collector gone, requests are refused until it is back"`, async () => {
      const c = await collector(type === 'unix' ? join(logs.dir, 'collector.sock') : undefined);
      await enableSocket(`sock-${type}`, c, type);
      const first = await s.request('POST', `kv/data/sock-${type}`, { body: { value: 'one' } });
      expect(first.status).toBe(204);
      await noticed();
      const entries = c.lines.map((l) => JSON.parse(l));
      expect(entriesOf(entries, entries.find((e) => e.request.path === `kv/data/sock-${type}`).request.id).map((e) => e.type)).toEqual(['request', 'response']);

      await c.kill();
      await noticed();
      for (let i = 0; i < 3; i++) {
        expect(await s.request('POST', `kv/data/sock-${type}-gone`, { body: { value: 'two' } })).toMatchObject({ status: 500, body: { errors: [FAILURE] } });
      }
      expect(await stored(`sock-${type}-gone`)).toBeUndefined();

      await c.revive();
      expect((await s.request('POST', `kv/data/sock-${type}-back`, { body: { value: 'three' } })).status).toBe(204);
      expect(s.core.audit.failures()[`sock-${type}/`]).toEqual({ type: 'socket', request: 3, response: 0 });
    });
  }

  it('"udp: one datagram per entry"', async () => {
    const socket = createSocket('udp4');
    const datagrams: string[] = [];
    socket.on('message', (m) => datagrams.push(m.toString()));
    await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
    try {
      const r = await s.request('PUT', 'sys/audit/udp', { body: { type: 'socket', options: { address: `127.0.0.1:${socket.address().port}`, socket_type: 'udp' } } });
      expect(r.status).toBe(204);
      expect((await s.request('POST', 'kv/data/udp', { body: { value: 'v' } })).status).toBe(204);
      await vi.waitFor(() => expect(datagrams.length).toBe(2));
      expect(datagrams.every((d) => d.indexOf('\n') === d.length - 1), 'one entry, one line, per datagram').toBe(true);
      expect(entriesAt(datagrams.map((d) => JSON.parse(d)), 'kv/data/udp').map((e) => e.type)).toEqual(['request', 'response']);
    } finally {
      socket.close();
    }
  });

  it('"a second device carries requests while the collector is gone"', async () => {
    const c = await collector();
    await enableSocket('sock-a', c, 'tcp');
    await enableFile(s, 'beside', logs.file('beside.log'));
    await c.kill();
    await noticed();
    expect((await s.request('POST', 'kv/data/beside', { body: { value: 'v' } })).status).toBe(204);
    expect(await stored('beside')).toEqual({ value: 'v' });
  });

  it('"a collector that stops reading: a write that cannot complete within write_timeout fails", and the request is refused', async () => {
    const c = await collector();
    await enableSocket('stuck', c, 'tcp', { write_timeout: '1s' });
    c.stall();
    // Values in the clear (an exempt key) so each entry is as large as its value: a few fill the socket's buffers.
    await s.request('POST', 'sys/mounts/kv/tune', { body: { audit_non_hmac_request_keys: 'value' } });
    try {
      const big = 'x'.repeat(8 * 1024 * 1024);
      const started = Date.now();
      let status = 204;
      for (let i = 0; i < 10 && status === 204; i++) status = (await s.request('POST', `kv/data/stuck${i}`, { body: { value: big } })).status;
      expect(status).toBe(500);
      expect(Date.now() - started).toBeLessThan(20_000);
      expect(s.core.audit.failures()['stuck/'].request).toBe(1);
    } finally {
      await s.core.audit.disable('stuck/');
      await s.request('POST', 'sys/mounts/kv/tune', { body: { audit_non_hmac_request_keys: '' } });
    }
  });
});

describe('SIGHUP', () => {
  let proc: ChildProcess | undefined;
  afterEach(() => {
    proc?.kill('SIGKILL');
    proc = undefined;
  });

  it('"SIGHUP reopens file devices without losing a line": a real server under load, its log renamed twice, every request has both entries across the files', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/v1`;
    proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/main.ts'], {
      env: { ...process.env, STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: 'root', STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_LOG_LEVEL: 'warn', STRONGROOM_AUDIT_DIR: tmpdir() },
      stdio: 'ignore',
    });
    const call = (method: string, path: string, body?: unknown) =>
      fetch(`${url}/${path}`, { method, headers: { 'x-vault-token': 'root', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    for (let i = 0; ; i++) {
      if ((await call('GET', 'sys/health').catch(() => undefined))?.status === 200) break;
      if (i === 200) throw new Error('the server did not start');
      await new Promise((r) => setTimeout(r, 50));
    }
    const file = logs.file('rotated.log');
    expect((await call('PUT', 'sys/audit/file', { type: 'file', options: { file_path: file } })).status).toBe(204);

    const ids: string[] = [];
    const rotations: string[] = [];
    const worker = async (w: number) => {
      for (let i = 0; i < 150; i++) {
        const r = await call('GET', 'sys/mounts');
        expect(r.status).toBe(200);
        ids.push(((await r.json()) as { request_id: string }).request_id);
        if (w === 0 && (i === 50 || i === 100)) {
          const moved = `${file}.${rotations.length + 1}`;
          renameSync(file, moved);
          rotations.push(moved);
          proc!.kill('SIGHUP');
        }
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));

    const perFile = [...rotations, file].map((f) => readEntries(f));
    expect(perFile.every((entries) => entries.length > 0), 'every file got lines').toBe(true);
    const all = perFile.flat();
    expect(all).toHaveLength(ids.length * 2);
    const seen = new Map<string, string[]>();
    for (const e of all) seen.set(e.request.id, [...(seen.get(e.request.id) ?? []), e.type]);
    for (const id of ids) expect(seen.get(id)?.sort(), id).toEqual(['request', 'response']);
    expect(proc.exitCode, 'SIGHUP did not end the process').toBeNull();
  });
});
