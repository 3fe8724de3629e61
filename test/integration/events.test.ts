// Events (docs/events.md): the outbox written with each change, delivered over Vault's WebSocket API and as
// Server-Sent Events, from the store, with per-event ACL and resume. A real WebSocket client (the `ws` package).
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import type WebSocket from 'ws';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';
import { subscriber, until, type Received } from '../support/events.ts';

const facts = inject('slapd');

let ou: IsolatedOu;
let s: TestServer;
const sockets: WebSocket[] = [];
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 3 });
  s = await startTestServer({ storage: 'sqlite', listen: true });
  await configure(s, facts, ou);
});
afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  await s.close().catch(() => undefined);
  await ou.cleanup();
});

const subscribe = (eventType: string, token: string, query: Record<string, string> = {}) => subscriber(s.url, sockets)(eventType, token, query);
const types = (r: Received) => r.events.map((e) => e.data.event_type);

describe('GET sys/events/subscribe/:event_type (WebSocket)', () => {
  it('"each LDAP change carries its event, in Vault\'s CloudEvents shape, with a sequence; no password in any event"', async () => {
    const sub = await subscribe('ldap/*', 'root');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    const first = (await cred(s, 'app')).password as string;
    await ok(s, 'POST', 'ldap/rotate-role/app');
    const second = (await cred(s, 'app')).password as string;
    await ok(s, 'POST', 'ldap/role/dyn', { creation_ldif: 'dn: cn={{.Username}},ou=x\nobjectClass: person\ncn: {{.Username}}\nsn: x\n', deletion_ldif: 'dn: cn={{.Username}},ou=x\nchangetype: delete\n' });
    await ok(s, 'POST', 'ldap/role/dyn', { default_ttl: 60 });
    await ok(s, 'DELETE', 'ldap/role/dyn');
    await until(() => sub.events.length >= 5, `five events (got ${JSON.stringify(types(sub))})`);
    expect(types(sub)).toEqual(['ldap/static-role-create', 'ldap/rotate', 'ldap/role-create', 'ldap/role-update', 'ldap/role-delete']);
    const rotate = sub.events[1];
    expect(rotate).toMatchObject({
      source: 'strongroom', specversion: '1.0', type: '*', datacontenttype: 'application/cloudevents',
      data: {
        event_type: 'ldap/rotate',
        plugin_info: { mount_class: 'secret', mount_path: 'ldap/', plugin: 'ldap' },
        metadata: { modified: 'true', operation: 'update', path: 'rotate-role/app', name: 'app' },
      },
    });
    expect(rotate.data.event).toEqual({ id: rotate.id, metadata: rotate.data.metadata });
    const seqs = sub.events.map((e) => e.sequence);
    expect(seqs).toEqual([...seqs].sort((a, b) => a - b));
    expect(new Set(seqs).size).toBe(seqs.length);
    // Canaries: every password the server holds or served; none may appear in any event, in any form.
    for (const canary of [first, second, ou.engine.password]) for (const raw of sub.raw) expect(raw).not.toContain(canary);
  });

  it('"json=false is a 400 saying only JSON is offered"', async () => {
    await expect(subscribe('ldap/*', 'root', { json: 'false' })).rejects.toMatchObject({ status: 400, body: expect.stringContaining('only JSON') });
  });

  it('"a filter keeps only the events its expression selects (Vault\'s operators)"', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'user1', rotation_period: '1h' });
    const sub = await subscribe('ldap/*', 'root', { filter: 'name == "other" and operation != "delete"' });
    const bad = subscribe('ldap/*', 'root', { filter: 'name === x' });
    await expect(bad).rejects.toMatchObject({ status: 400 });
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await ok(s, 'POST', 'ldap/rotate-role/other');
    await until(() => sub.events.length >= 1, 'the filtered event');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await ok(s, 'POST', 'ldap/rotate-role/other');
    await until(() => sub.events.length >= 2, 'the second filtered event');
    expect(sub.events.map((e) => e.data.metadata.name)).toEqual(['other', 'other']);
  });

  it('"resume with after=<sequence>: every event after it, none twice, none missed"', async () => {
    const live = await subscribe('ldap/rotate', 'root');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    for (let i = 0; i < 5; i++) await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => live.events.length >= 5, 'five rotations');
    const cut = live.events[1].sequence;
    const resumed = await subscribe('ldap/rotate', 'root', { after: String(cut) });
    await until(() => resumed.events.length >= 3, 'the rest');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => resumed.events.length >= 4 && live.events.length >= 6, 'the next one');
    expect(resumed.events.map((e) => e.id)).toEqual(live.events.slice(2).map((e) => e.id));
  });

  it('"two identical subscribers: one disconnects, the other keeps receiving"', async () => {
    const a = await subscribe('ldap/*', 'root');
    const b = await subscribe('ldap/*', 'root');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await until(() => a.events.length === 1 && b.events.length === 1, 'both');
    a.ws.close();
    await a.closed;
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => b.events.length === 3, 'the survivor');
  });
});

describe('event metrics (sys/metrics)', () => {
  it('"published, delivered, subscribers and the log\'s size are reported"', async () => {
    const sub = await subscribe('ldap/*', 'root');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => sub.events.length === 2, 'two events');
    const value = async (name: string) => {
      const text = await (await fetch(`${s.url}/v1/sys/metrics?format=prometheus`, { headers: { 'X-Vault-Token': 'root' } })).text();
      return Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
    };
    expect(await value('strongroom_events_published_total')).toBeGreaterThanOrEqual(2);
    expect(await value('strongroom_events_delivered_total')).toBe(2);
    expect(await value('strongroom_events_subscribers')).toBe(1);
    await expect.poll(() => value('strongroom_events_log_records'), { timeout: 5000 }).toBeGreaterThanOrEqual(2);
    expect(await value('strongroom_events_dropped_total')).toBe(0);
  });
});

describe('event ACL: the subscribe capability and subscribe_event_types', () => {
  async function tokenWith(policy: string): Promise<string> {
    expect((await s.request('PUT', 'sys/policies/acl/events-reader', { body: { policy } })).status).toBe(204);
    const r = await s.request('POST', 'auth/token/create', { body: { policies: ['events-reader'] } });
    return r.body.auth.client_token as string;
  }
  const reader = `
path "sys/events/subscribe/*" { capabilities = ["read"] }
path "ldap/rotate-role/app" {
  capabilities = ["subscribe"]
  subscribe_event_types = ["ldap/rotate*"]
}`;

  it('"a token receives only the events of paths where it has subscribe, for types its policy names"', async () => {
    const token = await tokenWith(reader);
    const sub = await subscribe('*', token);
    const all = await subscribe('*', 'root');
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/other', { username: 'user1', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/rotate-role/other');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await ok(s, 'POST', 'ldap/rotate-role/other');
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => all.events.filter((e) => e.data.event_type === 'ldap/rotate').length >= 4, 'every rotation');
    await until(() => sub.events.length >= 2, 'the allowed ones');
    expect(sub.events.map((e) => [e.data.event_type, e.data.metadata.name])).toEqual([['ldap/rotate', 'app'], ['ldap/rotate', 'app']]);
  });

  it('"the same policy in JSON grants the same"', async () => {
    const json = JSON.stringify({ path: { 'sys/events/subscribe/*': { capabilities: ['read'] }, 'ldap/rotate-role/*': { capabilities: ['subscribe'], subscribe_event_types: ['*'] } } });
    const sub = await subscribe('ldap/rotate', await tokenWith(json));
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/rotate-role/app');
    await until(() => sub.events.length === 1, 'the event');
  });

  it.each([
    ['no read on the subscribe endpoint', 'path "ldap/*" { capabilities = ["subscribe"]\n subscribe_event_types = ["*"] }', 403],
    ['no token at all', '', 403],
  ])('"refused at the door: %s"', async (_name, policy, status) => {
    const token = policy ? await tokenWith(policy) : 'not-a-token';
    await expect(subscribe('*', token)).rejects.toMatchObject({ status });
  });

  it('"a revoked token\'s socket is closed, and it receives nothing after the revocation"', async () => {
    const token = await tokenWith('path "sys/events/subscribe/*" { capabilities = ["read"] }\npath "ldap/*" {\n capabilities = ["subscribe"]\n subscribe_event_types = ["*"]\n}');
    const sub = await subscribe('*', token);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await until(() => sub.events.length === 1, 'one event');
    await ok(s, 'POST', 'auth/token/revoke', { token });
    const closed = await sub.closed;
    expect(closed.code).toBe(4001);
    await ok(s, 'POST', 'ldap/rotate-role/app');
    expect(sub.events).toHaveLength(1);
  });
});

describe('GET sys/events/stream/:event_type (Server-Sent Events)', () => {
  /** Reads the stream until `count` events arrived; the ids are the sequences. */
  async function stream(headers: Record<string, string>, count: number): Promise<Array<{ id: number; event: any }>> {
    const controller = new AbortController();
    const res = await fetch(`${s.url}/v1/sys/events/stream/ldap/rotate`, { headers: { 'X-Vault-Token': 'root', ...headers }, signal: controller.signal });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    const out: Array<{ id: number; event: any }> = [];
    const reader = res.body!.getReader();
    let text = '';
    const end = Date.now() + 15_000;
    while (out.length < count && Date.now() < end) {
      const { value, done } = await reader.read();
      if (done) break;
      text += Buffer.from(value).toString();
      for (let at = text.indexOf('\n\n'); at >= 0; at = text.indexOf('\n\n')) {
        const block = text.slice(0, at);
        text = text.slice(at + 2);
        const id = /^id: (\d+)$/m.exec(block)?.[1];
        const data = /^data: (.*)$/m.exec(block)?.[1];
        if (id && data) out.push({ id: Number(id), event: JSON.parse(data) });
      }
    }
    controller.abort();
    return out;
  }

  it('"Last-Event-ID resumes after that event: no gap, no duplicate"', async () => {
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    for (let i = 0; i < 4; i++) await ok(s, 'POST', 'ldap/rotate-role/app');
    const all = await stream({ 'Last-Event-ID': '0' }, 4);
    expect(all).toHaveLength(4);
    const rest = await stream({ 'Last-Event-ID': String(all[1]!.id) }, 2);
    expect(rest.map((e) => e.event.id)).toEqual(all.slice(2).map((e) => e.event.id));
    expect(rest.map((e) => e.id)).toEqual(all.slice(2).map((e) => e.event.sequence));
  });
});
