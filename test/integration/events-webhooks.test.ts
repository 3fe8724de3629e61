// Webhooks (docs/events.md): signed, at-least-once delivery from the event log, retries, the dead-letter list and its
// replay, and the rules on where a webhook may point. The receiver is a real HTTP server on 127.0.0.1.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import type WebSocket from 'ws';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, ok, ouConfig } from '../support/ldap-engine.ts';
import { subscriber, until } from '../support/events.ts';
import { startNode, type NodeProcess } from '../support/node-process.ts';

const facts = inject('slapd');
const SECRET = 'whsec-0123456789abcdef';

interface Receiver {
  url: string;
  /** Every request as it arrived. */
  requests: Array<{ body: string; signature: string; headers: Record<string, unknown> }>;
  /** Answers 500 to the next `n` requests. */
  failNext(n: number): void;
  server: Server;
}

async function receiver(): Promise<Receiver> {
  let failing = 0;
  const requests: Receiver['requests'] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      requests.push({ body, signature: String(req.headers['x-strongroom-signature']), headers: req.headers });
      if (failing > 0) {
        failing--;
        res.writeHead(500).end('a body the server must not store');
      } else res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, requests, failNext: (n) => (failing = n), server };
}

/** The receiver's side of the signature: t=<unix>,v1=<hex HMAC-SHA256(secret, t + "." + body)>. */
function verified(signature: string, body: string): boolean {
  const m = /^t=(\d+),v1=([0-9a-f]{64})$/.exec(signature);
  if (!m) return false;
  const expected = createHmac('sha256', SECRET).update(`${m[1]}.${body}`).digest();
  return timingSafeEqual(expected, Buffer.from(m[2]!, 'hex')) && Math.abs(Date.now() / 1000 - Number(m[1])) < 300;
}

let ou: IsolatedOu;
let s: TestServer;
let hook: Receiver;
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2 });
  hook = await receiver();
});
afterEach(async () => {
  await s?.close().catch(() => undefined);
  hook.server.close();
  await ou.cleanup();
});

async function serverWith(env: Record<string, string> = {}) {
  s = await startTestServer({ storage: 'sqlite', listen: true, env: { STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE: '1s', ...env } });
  await configure(s, facts, ou);
}

describe('sys/events/webhooks/:name', () => {
  it('"a receiver that fails 3 times then succeeds gets each event exactly once after dedupe by id, every delivery signed"', async () => {
    await serverWith();
    await ok(s, 'POST', 'sys/events/webhooks/ops', { url: hook.url, event_types: 'ldap/rotate*,ldap/static-role-*', secret: SECRET, headers: { Authorization: 'Bearer receiver-token-canary' } });
    hook.failNext(3);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    for (let i = 0; i < 3; i++) await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => new Set(hook.requests.map((r) => JSON.parse(r.body).id)).size === 4 && hook.requests.length >= 7, 'four events after three failures', 30_000);
    for (const r of hook.requests) {
      expect(verified(r.signature, r.body)).toBe(true);
      expect(r.headers['authorization']).toBe('Bearer receiver-token-canary');
      expect(r.headers['content-type']).toBe('application/cloudevents+json');
    }
    const unique = [...new Map(hook.requests.map((r) => [JSON.parse(r.body).id, JSON.parse(r.body)])).values()];
    expect(unique.map((e) => e.data.event_type)).toEqual(['ldap/static-role-create', 'ldap/rotate', 'ldap/rotate', 'ldap/rotate']);
    expect(unique.map((e) => e.sequence)).toEqual([...unique.map((e) => e.sequence)].sort((a, b) => a - b));
    expect((await s.request('GET', 'sys/events/webhooks/ops/failures')).body.data.failures).toEqual([]);
    // Read back without the secret or the header values.
    const read = (await s.request('GET', 'sys/events/webhooks/ops')).body.data;
    expect(read).toEqual({ url: hook.url, event_types: ['ldap/rotate*', 'ldap/static-role-*'], filter: '', headers: ['Authorization'] });
    expect(JSON.stringify(read)).not.toContain(SECRET);
  });

  it('"past its last attempt an event goes to the dead-letter list; replay delivers it and empties the list"', async () => {
    await serverWith({ STRONGROOM_EVENTS_WEBHOOK_ATTEMPTS: '2' });
    await ok(s, 'POST', 'sys/events/webhooks/ops', { url: hook.url, event_types: 'ldap/static-role-*', secret: SECRET });
    hook.failNext(2);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/two', { username: 'user1', rotation_period: '1h' });
    await until(() => hook.requests.length >= 3, 'two failed attempts, then the next event');
    const failures = async () => (await s.request('GET', 'sys/events/webhooks/ops/failures')).body.data.failures as any[];
    await expect.poll(failures).toHaveLength(1);
    const [dead] = await failures();
    expect(dead).toMatchObject({ event_type: 'ldap/static-role-create', attempts: 2, last_error: 'HTTP 500' });
    expect(JSON.stringify(dead)).not.toContain('must not store');
    expect((await ok(s, 'POST', 'sys/events/webhooks/ops/failures/replay')).data).toEqual({ replayed: 1, failed: 0 });
    expect(await failures()).toEqual([]);
    const delivered = hook.requests.map((r) => JSON.parse(r.body).id);
    expect(delivered.at(-1)).toBe(dead.id);
    expect(await s.request('GET', 'sys/metrics?format=prometheus').then((r) => r.status)).toBe(200);
  });

  it.each([
    ['http:// to a non-loopback host', { url: 'http://example.com/hook' }, /url: http:\/\/ is allowed only to loopback/],
    ['another scheme', { url: 'ftp://127.0.0.1/x' }, /url: must be https/],
    ['credentials in the URL', { url: 'https://user:pw@example.com/hook' }, /url: must not hold credentials/],
    ['a short secret', { secret: 'short' }, /secret: at least 16/],
    ['a reserved header', { headers: { 'X-Strongroom-Signature': 'forged' } }, /headers: "X-Strongroom-Signature" cannot be set/],
    ['a bad filter', { filter: 'name ===' }, /filter/],
  ])('"a webhook is refused with a 400 naming the field: %s"', async (_name, change, message) => {
    await serverWith();
    const r = await s.request('POST', 'sys/events/webhooks/bad', { body: { url: hook.url, event_types: '*', secret: SECRET, ...change } });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toMatch(message);
  });
});

describe('kill -9 of the server during a burst of rotations (a real process)', () => {
  it('"every rotation in storage has exactly its event (role and rotation matched, not counted), and the webhook receives all of them after the restart"', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'strongroom-events-kill-'));
    const storage = `sqlite:${join(dir, 'db.sqlite')}`;
    const key = randomBytes(32).toString('base64');
    const env = { STRONGROOM_EVENTS_WEBHOOK_RETRY_BASE: '1s' };
    const sockets: WebSocket[] = [];
    const roles = ['r0', 'r1'];
    let node: NodeProcess | undefined;
    try {
      node = await startNode(storage, key, env);
      const call = async (n: NodeProcess, method: string, path: string, body?: unknown) => {
        const r = await n.request(method, path, { body });
        expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
        return r.body;
      };
      await call(node, 'POST', 'ldap/config', ouConfig(facts, ou));
      await call(node, 'POST', 'sys/events/webhooks/ops', { url: hook.url, event_types: 'ldap/rotate', secret: SECRET });
      for (const [i, role] of roles.entries()) await call(node, 'POST', `ldap/static-role/${role}`, { username: `user${i}`, rotation_period: '1h' });
      // The rotation each role's creation recorded (reported as static-role-create, not as a rotation).
      const created = new Map<string, string>();
      for (const role of roles) created.set(role, (await call(node, 'GET', `ldap/static-cred/${role}`)).data.last_service_rotation);
      // The burst: each role rotated again and again until the kill; every rotation answered 2xx is read back, so the
      // test knows it by the time the server recorded it (static-cred's last_service_rotation, which its event names).
      const observed = new Map<string, string[]>(roles.map((r) => [r, []]));
      const sent = new Map<string, number>(roles.map((r) => [r, 0]));
      const victim = node;
      const burst = roles.map(async (role) => {
        for (let i = 0; i < 200; i++) {
          sent.set(role, sent.get(role)! + 1);
          const r = await victim.request('POST', `ldap/rotate-role/${role}`).catch(() => undefined);
          if (!r) return;
          if (r.status >= 300) continue;
          const c = await victim.request('GET', `ldap/static-cred/${role}`).catch(() => undefined);
          if (!c) return;
          observed.get(role)!.push(c.body.data.last_service_rotation);
        }
      });
      const acknowledged = () => [...observed.values()].reduce((n, list) => n + list.length, 0);
      await until(() => acknowledged() >= 10, 'a few rotations', 30_000);
      await node.kill();
      await Promise.all(burst);
      node = await startNode(storage, key, env);

      // Everything the log holds, read from the start; a rotation the kill interrupted is finished by the restarted
      // node (its write-ahead entry), with its event, so the check waits for the store and the log to agree.
      const log = await subscriber(node.url, sockets)('ldap/rotate', 'root', { after: '0' });
      const times = (role: string) => log.events.filter((e) => e.data.metadata.name === role).map((e) => e.data.metadata.last_service_rotation as string);
      // Until the interrupted rotation is finished, store and log agree on the one before it while the directory may
      // already hold the interrupted one's password: the wait is also for every stored password to bind. (Since the
      // engines start after the listener opens, the test's first reads can come before that recovery has run.)
      const stored = new Map<string, string>();
      const agree = async () => {
        const binds: boolean[] = [];
        for (const [i, role] of roles.entries()) {
          const cred = (await call(node!, 'GET', `ldap/static-cred/${role}`)).data;
          stored.set(role, cred.last_service_rotation);
          binds.push(await canBind(facts.url, ou.users[i]!.dn, cred.password));
        }
        return binds.every(Boolean) && roles.every((role) => (times(role).at(-1) ?? created.get(role)) === stored.get(role));
      };
      for (const end = Date.now() + 20_000; !(await agree()); ) {
        expect(Date.now() < end, `store, log and directory never agreed: ${JSON.stringify({ stored: [...stored], log: roles.map(times) })}`).toBe(true);
        await new Promise((r) => setTimeout(r, 200));
      }
      for (const role of roles) {
        const logged = times(role);
        // Exactly one event per rotation, in the order they were recorded ...
        expect(new Set(logged).size, `${role}: a rotation with two events`).toBe(logged.length);
        expect(logged, role).toEqual([...logged].sort());
        // ... every rotation the server acknowledged has its own event ...
        for (const t of observed.get(role)!) expect(logged, `${role}: acknowledged rotation ${t} has no event`).toContain(t);
        // ... the rotation in storage is the last one logged (no event of a rotation that never landed), and none
        // is logged for more rotations than were asked for.
        expect(logged.at(-1) ?? created.get(role)).toBe(stored.get(role));
        expect(logged.length).toBeLessThanOrEqual(sent.get(role)!);
      }
      const seqs = log.events.map((e) => e.sequence);
      expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
      // The password stored last is the directory's, for every role.
      for (const [i, role] of roles.entries()) {
        const cred = await call(node, 'GET', `ldap/static-cred/${role}`);
        expect(await canBind(facts.url, ou.users[i]!.dn, cred.data.password)).toBe(true);
      }
      // The webhook, after dedupe by id, received exactly the logged rotations, each signed.
      const ids = () => new Set(hook.requests.map((r) => JSON.parse(r.body).id as string));
      await until(() => log.events.every((e) => ids().has(e.id)), 'every logged rotation at the webhook', 30_000);
      expect([...ids()].sort()).toEqual(log.events.map((e) => e.id).sort());
      for (const r of hook.requests) expect(verified(r.signature, r.body)).toBe(true);
    } finally {
      for (const ws of sockets) ws.terminate();
      await node?.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
