// Cloud static roles (issue 28): an existing application's client secret owned and rotated by the engine, with an
// overlap so no workload breaks. Real SDK clients against the emulator; the emulator and the server share a fake
// clock (tokens live ten years so the clock can jump weeks), so the emulator judges secrets' start and end times.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { seedApp, type SeededApp } from '../support/azure-emulator/seed.ts';
import { adminConfig, cloudWorldPerFile, startCloudServer, tokenWorks } from '../support/cloud-engine.ts';
import { parseScrape } from '../support/prometheus.ts';
import type { TestServer } from '../support/server.ts';

const HOUR = 3_600_000;
const PERIOD = 720 * HOUR;
let clock = new FakeClock(Date.now());
const servers: TestServer[] = [];
const dirs: string[] = [];
const world = cloudWorldPerFile(async () => {
  for (const s of servers.splice(0)) await s.close().catch(() => undefined);
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
}, { now: () => clock.now(), tokenLifetimeSec: 10 * 365 * 86_400 });

const unsealKey = randomBytes(32).toString('base64');

async function server(config: Record<string, unknown> = {}, dataDir?: string): Promise<TestServer> {
  clock = new FakeClock(Date.now());
  const s = await startCloudServer(world, { clock, storage: dataDir ? 'sqlite' : 'memory', dataDir, unsealKey });
  servers.push(s);
  expect((await s.request('POST', 'cloud/config', { body: { ...adminConfig(world), ...config } })).status).toBe(204);
  return s;
}
function target(name: string): { app: SeededApp; passwords: () => Array<{ keyId: string; displayName: string | null; start: number; end: number }> } {
  const app = seedApp(world.emu.state, { displayName: name });
  const live = world.emu.state.applications.get(app.objectId)!;
  return { app, passwords: () => live.passwordCredentials.map((p) => ({ keyId: p.keyId, displayName: p.displayName, start: Date.parse(p.startDateTime), end: Date.parse(p.endDateTime) })) };
}
const engineMade = <P extends { displayName: string | null }>(ps: P[]): P[] => ps.filter((p) => p.displayName?.startsWith('strongroom-static-'));
const read = async (s: TestServer, name: string) => (await s.request('GET', `cloud/static-roles/${name}`)).body.data;
const creds = async (s: TestServer, name: string) => s.request('GET', `cloud/static-creds/${name}`);
/** Lets the leader's timer run what is due at the clock's time. */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await clock.advance(0);
    await new Promise((r) => setTimeout(r, 20));
  }
}
async function advanceTo(at: number): Promise<void> {
  await clock.advance(Math.max(0, at - clock.now()));
  await settle();
}

describe('POST cloud/static-roles/:name', () => {
  it('"the first secret is made at creation": one secret, start now, end rotation_period later; reads show no secret value', async () => {
    const s = await server();
    const { app, passwords } = target('static-create');
    const t0 = clock.now();
    expect((await s.request('POST', 'cloud/static-roles/app1', { body: { application_object_id: app.objectId, rotation_period: '720h', rotation_grace_period: '1h', metadata: { team: 'payments' } } })).status).toBe(204);
    const made = engineMade(passwords());
    expect(made).toHaveLength(1);
    expect(made[0].end).toBe(t0 + PERIOD);
    const role = await read(s, 'app1');
    expect(role).toMatchObject({
      application_object_id: app.objectId, client_id: app.appId, rotation_period: 720 * 3600, rotation_grace_period: 3600, seamless_rotation: true,
      defer_initial_creds: false, metadata: { team: 'payments' }, secret_id: made[0].keyId, expiration: new Date(t0 + PERIOD).toISOString(),
      staged_secret_id: '', next_rotation: new Date(t0 + PERIOD - 2 * HOUR).toISOString(),
    });
    expect(JSON.stringify(role)).not.toMatch(/client_secret/);
    const c = await creds(s, 'app1');
    expect(c.status).toBe(200);
    expect(c.body.lease_id).toBe('');
    expect(c.body.data).toMatchObject({ client_id: app.appId, secret_id: made[0].keyId, expiration: new Date(t0 + PERIOD).toISOString(), metadata: { team: 'payments' } });
    expect(await tokenWorks(world, app.appId, c.body.data.client_secret)).toBe(true);
    expect((await s.request('LIST', 'cloud/static-roles')).body.data.keys).toEqual(['app1']);
  });

  it('"rotation_period ≥ 720h, default 17520h; ttl is its deprecated alias; 0 grace is the default"', async () => {
    const s = await server();
    const { app } = target('static-defaults');
    expect((await s.request('POST', 'cloud/static-roles/d', { body: { application_object_id: app.objectId, rotation_grace_period: 0 } })).status).toBe(204);
    expect(await read(s, 'd')).toMatchObject({ rotation_period: 17_520 * 3600, rotation_grace_period: 300 });
    expect((await s.request('POST', 'cloud/static-roles/d', { body: { ttl: '8760h', rotation_grace_period: -1 } })).status).toBe(204);
    expect(await read(s, 'd')).toMatchObject({ rotation_period: 8760 * 3600, rotation_grace_period: -1 });
  });

  it('"metadata merged into static-creds, role keys win over request keys"', async () => {
    const s = await server();
    const { app } = target('static-metadata');
    await s.request('POST', 'cloud/static-roles/m', { body: { application_object_id: app.objectId, metadata: { team: 'payments', env: 'prod' } } });
    const c = await s.request('GET', 'cloud/static-creds/m?metadata=team=other&metadata=ticket=42');
    expect(c.body.data.metadata).toEqual({ team: 'payments', env: 'prod', ticket: '42' });
    expect((await s.request('GET', 'cloud/static-creds/m?metadata=ticket=7')).body.data.metadata).toEqual({ team: 'payments', env: 'prod', ticket: '7' });
    const bad = await s.request('GET', 'cloud/static-creds/m?metadata=novalue');
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0]).toContain('"metadata"');
  });

  it('"defer_initial_creds" (alias skip_import_rotation): no secret until import or rotate-role; static-creds and /token are 400', async () => {
    const s = await server();
    const { app, passwords } = target('static-defer');
    expect((await s.request('POST', 'cloud/static-roles/later', { body: { application_object_id: app.objectId, skip_import_rotation: true } })).status).toBe(204);
    expect(engineMade(passwords())).toHaveLength(0);
    expect(await read(s, 'later')).toMatchObject({ defer_initial_creds: true, secret_id: '' });
    expect((await creds(s, 'later')).status).toBe(400);
    expect((await s.request('POST', 'cloud/static-creds/later/token', { body: { scope: `${world.emu.graphUrl}/.default` } })).status).toBe(400);
    expect((await s.request('POST', 'cloud/rotate-role/later')).status).toBe(204);
    expect(engineMade(passwords())).toHaveLength(1);
    expect((await creds(s, 'later')).status).toBe(200);
  });

  it('"seamless_rotation unset → the config\'s value": a config written now defaults to true, and false is honoured', async () => {
    const s = await server({ seamless_rotation: false });
    const { app } = target('static-seamless-default');
    expect((await s.request('GET', 'cloud/config')).body.data.seamless_rotation).toBe(false);
    await s.request('POST', 'cloud/static-roles/s', { body: { application_object_id: app.objectId } });
    expect((await read(s, 's')).seamless_rotation).toBe(false);
    await s.request('POST', 'cloud/static-roles/s', { body: { seamless_rotation: true } });
    expect((await read(s, 's')).seamless_rotation).toBe(true);
  });

  describe('hostile input: each a 400 naming the field, nothing stored', () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ['missing application_object_id', {}, 'application_object_id'],
      ['application_object_id not a GUID', { application_object_id: '../../etc' }, 'application_object_id'],
      ['application_object_id overlong', { application_object_id: 'a'.repeat(65) }, 'application_object_id'],
      ['application_object_id of no application', { application_object_id: '00000000-0000-4000-8000-000000000000' }, 'application_object_id'],
      ['rotation_period below 720h', { rotation_period: '719h' }, 'rotation_period'],
      ['rotation_period zero', { rotation_period: 0 }, 'rotation_period'],
      ['rotation_period negative', { rotation_period: '-720h' }, 'rotation_period'],
      ['rotation_period not a duration', { rotation_period: 'a year' }, 'rotation_period'],
      ['rotation_period past any duration', { rotation_period: '9'.repeat(40) }, 'rotation_period'],
      ['ttl below 720h', { ttl: '1h' }, 'ttl'],
      ['rotation_period and ttl with different values', { rotation_period: '720h', ttl: '800h' }, 'rotation_period'],
      ['rotation_grace_period above (period - 1h)/2', { rotation_period: '720h', rotation_grace_period: '360h' }, 'rotation_grace_period'],
      ['rotation_grace_period negative other than -1', { rotation_grace_period: -2 }, 'rotation_grace_period'],
      ['rotation_grace_period not a duration', { rotation_grace_period: 'soon' }, 'rotation_grace_period'],
      ['rotation_grace_period an object', { rotation_grace_period: { s: 1 } }, 'rotation_grace_period'],
      ['metadata not a map', { metadata: 'team' }, 'metadata'],
      ['metadata with a nested value', { metadata: { a: { b: 1 } } }, 'metadata'],
      ['metadata with an empty key', { metadata: { '': 'x' } }, 'metadata'],
      ['metadata value overlong', { metadata: { a: 'x'.repeat(1025) } }, 'metadata'],
      ['metadata with too many keys', { metadata: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) }, 'metadata'],
      ['defer_initial_creds not a bool', { defer_initial_creds: 'maybe' }, 'defer_initial_creds'],
      ['defer_initial_creds and skip_import_rotation with different values', { defer_initial_creds: true, skip_import_rotation: false }, 'defer_initial_creds'],
      ['seamless_rotation not a bool', { seamless_rotation: [true] }, 'seamless_rotation'],
    ];
    let s: TestServer;
    let app: SeededApp;
    let passwords: () => unknown[];
    beforeAll(async () => {
      s = await server();
      servers.splice(servers.indexOf(s), 1);
      ({ app, passwords } = target('static-hostile'));
    });
    afterAll(async () => s.close());
    it.each(cases)('%s', async (_label, body, fieldName) => {
      const before = passwords().length;
      const full = 'application_object_id' in body || _label.startsWith('missing') ? body : { application_object_id: app.objectId, ...body };
      const r = await s.request('POST', 'cloud/static-roles/hostile', { body: full });
      expect(r.status).toBe(400);
      expect(r.body.errors.join(' ')).toContain(`"${fieldName}"`);
      expect((await s.request('GET', 'cloud/static-roles/hostile')).status).toBe(404);
      expect(passwords().length).toBe(before);
    });
  });
});

describe('hostile input on updates, import and rotate-role: each a 400 naming the field, nothing changed', () => {
  const cases: Array<[string, string, Record<string, unknown>, string]> = [
    ['application_object_id changed', 'cloud/static-roles/h', { application_object_id: '00000000-0000-4000-8000-000000000001' }, 'application_object_id'],
    ['defer_initial_creds on an update', 'cloud/static-roles/h', { defer_initial_creds: true }, 'defer_initial_creds'],
    ['skip_import_rotation on an update', 'cloud/static-roles/h', { skip_import_rotation: false }, 'skip_import_rotation'],
    ['a grace above the bound of a shorter period', 'cloud/static-roles/h', { rotation_period: '720h', rotation_grace_period: '400h' }, 'rotation_grace_period'],
    ['import without secret_id', 'cloud/static-roles/h/import', {}, 'secret_id'],
    ['import secret_id not a GUID', 'cloud/static-roles/h/import', { secret_id: "x' or 1=1" }, 'secret_id'],
    ['import secret_id overlong', 'cloud/static-roles/h/import', { secret_id: 'a'.repeat(65) }, 'secret_id'],
    ['import secret_id an object', 'cloud/static-roles/h/import', { secret_id: { id: 1 } }, 'secret_id'],
    ['import client_secret overlong', 'cloud/static-roles/h/import', { secret_id: '00000000-0000-4000-8000-000000000000', client_secret: 'x'.repeat(1025) }, 'client_secret'],
    ['rotate-role force not a bool', 'cloud/rotate-role/h', { force: 'sometimes' }, 'force'],
  ];
  let s: TestServer;
  let before: unknown;
  let passwords: () => unknown[];
  beforeAll(async () => {
    s = await server();
    servers.splice(servers.indexOf(s), 1);
    const t = target('static-hostile-update');
    passwords = t.passwords;
    expect((await s.request('POST', 'cloud/static-roles/h', { body: { application_object_id: t.app.objectId, rotation_period: '1440h' } })).status).toBe(204);
    before = await read(s, 'h');
  });
  afterAll(async () => s.close());
  it.each(cases)('%s', async (_label, path, body, fieldName) => {
    const count = passwords().length;
    const r = await s.request('POST', path, { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(`"${fieldName}"`);
    expect(await read(s, 'h')).toEqual(before);
    expect(passwords().length).toBe(count);
  });
});

describe('the own application', () => {
  it('"refused at write (400)" by object id, and by the client id given as the object id', async () => {
    const s = await server();
    for (const id of [world.tenant.admin.objectId, world.tenant.admin.appId]) {
      const r = await s.request('POST', 'cloud/static-roles/own', { body: { application_object_id: id } });
      expect(r.status).toBe(400);
      expect(r.body.errors[0]).toMatch(/application_object_id.*engine's own application/);
    }
    expect((await s.request('GET', 'cloud/static-roles/own')).status).toBe(404);
  });

  it('"refused at read and rotate (403)" once the engine signs in as the role\'s application; config refuses to switch to it', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-static-own-'));
    dirs.push(dataDir);
    const s = await server({}, dataDir);
    const { app } = target('static-own-later');
    expect((await s.request('POST', 'cloud/static-roles/later-own', { body: { application_object_id: app.objectId } })).status).toBe(204);
    const switched = await s.request('POST', 'cloud/config', { body: { client_id: app.appId, client_secret: app.clientSecret } });
    expect(switched.status).toBe(400);
    expect(switched.body.errors[0]).toMatch(/later-own/);
    await s.close();

    // Only the environment can still point the engine at it: then the role is neither served nor rotated.
    const env = await startCloudServer(world, { clock, storage: 'sqlite', dataDir, unsealKey, env: { CLOUD_CLIENT_ID: app.appId, CLOUD_CLIENT_SECRET: app.clientSecret } });
    servers.push(env);
    for (const [method, path] of [['GET', 'cloud/static-creds/later-own'], ['POST', 'cloud/rotate-role/later-own'], ['POST', 'cloud/static-creds/later-own/token']] as const) {
      const r = await env.request(method, path, { body: method === 'POST' ? { scope: `${world.emu.graphUrl}/.default` } : undefined });
      expect(r.status, JSON.stringify(r.body)).toBe(403);
      expect(r.body.errors[0]).toMatch(/engine's own application/);
    }
    expect((await env.request('GET', 'cloud/static-roles/later-own')).status).toBe(200);
  });
});

describe('scheduled rotation', () => {
  it('"seamless: the next secret is staged to start at expiry − grace; static-creds switches at its start; the old one authenticates during the overlap and stops after"', async () => {
    const s = await server();
    const { app, passwords } = target('static-seamless');
    const t0 = clock.now();
    await s.request('POST', 'cloud/static-roles/sl', { body: { application_object_id: app.objectId, rotation_period: '720h', rotation_grace_period: '1h' } });
    const first = (await creds(s, 'sl')).body.data;
    const end1 = t0 + PERIOD;

    await advanceTo(end1 - 2 * HOUR - 1000);
    expect(engineMade(passwords())).toHaveLength(1);
    await advanceTo(end1 - 2 * HOUR);
    await vi.waitFor(async () => expect((await read(s, 'sl')).staged_secret_id).not.toBe(''));
    const role = await read(s, 'sl');
    expect(role.staged_start).toBe(new Date(end1 - HOUR).toISOString());
    const staged = passwords().find((p) => p.keyId === role.staged_secret_id)!;
    expect(staged).toMatchObject({ start: end1 - HOUR, end: end1 - HOUR + PERIOD });
    expect((await creds(s, 'sl')).body.data.secret_id).toBe(first.secret_id);

    await advanceTo(end1 - HOUR);
    const second = (await creds(s, 'sl')).body.data;
    expect(second.secret_id).toBe(role.staged_secret_id);
    expect(second.expiration).toBe(new Date(end1 - HOUR + PERIOD).toISOString());
    expect(await tokenWorks(world, app.appId, first.client_secret)).toBe(true);
    expect(await tokenWorks(world, app.appId, second.client_secret)).toBe(true);

    await advanceTo(end1);
    await vi.waitFor(() => expect(engineMade(passwords()).map((p) => p.keyId)).toEqual([second.secret_id]));
    expect(await tokenWorks(world, app.appId, first.client_secret)).toBe(false);
    expect(await tokenWorks(world, app.appId, second.client_secret)).toBe(true);
    expect(passwords().map((p) => p.displayName)).toContain('seed');
    expect(await read(s, 'sl')).toMatchObject({ secret_id: second.secret_id, staged_secret_id: '', next_rotation: new Date(end1 - HOUR + PERIOD - 2 * HOUR).toISOString() });
  });

  it('"a restart never rotates early; a leader that comes late stages at once", with the start the schedule gave it', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'cloud-static-restart-'));
    dirs.push(dataDir);
    const s1 = await server({}, dataDir);
    const { app, passwords } = target('static-restart');
    const t0 = clock.now();
    await s1.request('POST', 'cloud/static-roles/rs', { body: { application_object_id: app.objectId, rotation_period: '720h', rotation_grace_period: '1h' } });
    await s1.close();
    servers.splice(servers.indexOf(s1), 1);

    const early = async (at: number) => {
      clock = new FakeClock(at);
      const s = await startCloudServer(world, { clock, storage: 'sqlite', dataDir, unsealKey });
      servers.push(s);
      await settle();
      return s;
    };
    const s2 = await early(t0 + PERIOD - 2 * HOUR - 1000);
    expect(engineMade(passwords())).toHaveLength(1);
    await s2.close();
    servers.splice(servers.indexOf(s2), 1);

    const s3 = await early(t0 + PERIOD - 90 * 60_000);
    await vi.waitFor(async () => expect((await read(s3, 'rs')).staged_start).toBe(new Date(t0 + PERIOD - HOUR).toISOString()));
    expect(engineMade(passwords())).toHaveLength(2);
  });

  it('"without seamless: add, switch, remove the old one" at the end of the overlap', async () => {
    const s = await server();
    const { app, passwords } = target('static-plain');
    const t0 = clock.now();
    await s.request('POST', 'cloud/static-roles/pl', { body: { application_object_id: app.objectId, rotation_grace_period: '1h', seamless_rotation: false, rotation_period: '720h' } });
    const first = (await creds(s, 'pl')).body.data;
    await advanceTo(t0 + PERIOD - HOUR);
    await vi.waitFor(async () => expect((await creds(s, 'pl')).body.data.secret_id).not.toBe(first.secret_id));
    const second = (await creds(s, 'pl')).body.data;
    expect(second.expiration).toBe(new Date(t0 + PERIOD - HOUR + PERIOD).toISOString());
    expect(await tokenWorks(world, app.appId, first.client_secret)).toBe(true);
    expect((await read(s, 'pl')).pending_removals).toEqual([{ secret_id: first.secret_id, remove_at: new Date(t0 + PERIOD).toISOString(), reason: 'rotation' }]);
    await advanceTo(t0 + PERIOD);
    await vi.waitFor(() => expect(engineMade(passwords()).map((p) => p.keyId)).toEqual([second.secret_id]));
  });
});

describe('POST cloud/rotate-role/:name', () => {
  it('"the new secret starts now, the old one is removed only after the grace"; a second one inside the window is 409 naming its end unless force=true', async () => {
    const s = await server();
    const { app, passwords } = target('static-manual');
    await s.request('POST', 'cloud/static-roles/mr', { body: { application_object_id: app.objectId, rotation_grace_period: '10m' } });
    const first = (await creds(s, 'mr')).body.data;
    const t1 = clock.now();
    expect((await s.request('POST', 'cloud/rotate-role/mr')).status).toBe(204);
    const second = (await creds(s, 'mr')).body.data;
    expect(second.secret_id).not.toBe(first.secret_id);
    const ends = new Date(t1 + 10 * 60_000).toISOString();
    expect(await read(s, 'mr')).toMatchObject({ pending_removals: [{ secret_id: first.secret_id, remove_at: ends, reason: 'manual' }], manual_rotation_window_ends: ends });
    expect(await tokenWorks(world, app.appId, first.client_secret)).toBe(true);
    expect(await tokenWorks(world, app.appId, second.client_secret)).toBe(true);

    const again = await s.request('POST', 'cloud/rotate-role/mr');
    expect(again.status).toBe(409);
    expect(again.body.errors[0]).toContain(ends);
    expect((await s.request('POST', 'cloud/rotate-role/mr', { body: { force: true } })).status).toBe(204);
    const third = (await creds(s, 'mr')).body.data;
    expect(engineMade(passwords()).map((p) => p.keyId).sort()).toEqual([first.secret_id, second.secret_id, third.secret_id].sort());

    await advanceTo(t1 + 10 * 60_000);
    await vi.waitFor(() => expect(engineMade(passwords()).map((p) => p.keyId)).toEqual([third.secret_id]));
    expect(await tokenWorks(world, app.appId, first.client_secret)).toBe(false);
    expect(await tokenWorks(world, app.appId, second.client_secret)).toBe(false);
    expect(await tokenWorks(world, app.appId, third.client_secret)).toBe(true);
    expect((await read(s, 'mr')).pending_removals).toEqual([]);
  });

  it('an unknown role is 404', async () => {
    const s = await server();
    expect((await s.request('POST', 'cloud/rotate-role/nobody')).status).toBe(404);
  });
});

describe('POST cloud/static-roles/:name/import', () => {
  it('"take over an existing secret" with client_secret: served at once; the engine\'s previous secret goes after the grace', async () => {
    const s = await server();
    const { app, passwords } = target('static-import');
    await s.request('POST', 'cloud/static-roles/im', { body: { application_object_id: app.objectId, rotation_grace_period: '5m' } });
    const made = (await creds(s, 'im')).body.data;
    const r = await s.request('POST', 'cloud/static-roles/im/import', { body: { secret_id: app.keyId, client_secret: app.clientSecret } });
    expect(r.status).toBe(204);
    expect((await creds(s, 'im')).body.data).toMatchObject({ secret_id: app.keyId, client_secret: app.clientSecret });
    await advanceTo(clock.now() + 5 * 60_000);
    await vi.waitFor(() => expect(passwords().map((p) => p.keyId)).toEqual([app.keyId]));
    expect(passwords().some((p) => p.keyId === made.secret_id)).toBe(false);
  });

  it('"without client_secret static-creds is refused until the first rotation"; a wrong secret_id or value is a 400 naming it', async () => {
    const s = await server();
    const { app } = target('static-import-blind');
    await s.request('POST', 'cloud/static-roles/ib', { body: { application_object_id: app.objectId, defer_initial_creds: true } });
    expect((await s.request('POST', 'cloud/static-roles/ib/import', { body: { secret_id: '00000000-0000-4000-8000-000000000000' } })).body.errors[0]).toMatch(/"secret_id"/);
    expect((await s.request('POST', 'cloud/static-roles/ib/import', { body: { secret_id: app.keyId, client_secret: 'zzz8Q~not-it' } })).body.errors[0]).toMatch(/"client_secret"/);
    expect((await s.request('POST', 'cloud/static-roles/ib/import', { body: {} })).body.errors[0]).toMatch(/"secret_id"/);
    expect((await s.request('POST', 'cloud/static-roles/ib/import', { body: { secret_id: app.keyId } })).status).toBe(204);
    expect(await read(s, 'ib')).toMatchObject({ secret_id: app.keyId });
    expect((await creds(s, 'ib')).status).toBe(400);
    expect((await s.request('POST', 'cloud/rotate-role/ib')).status).toBe(204);
    expect((await creds(s, 'ib')).status).toBe(200);
  });
});

describe('POST cloud/static-creds/:name/token', () => {
  it('"an access token from the directory\'s token endpoint using the role\'s current secret, no lease"', async () => {
    const s = await server();
    const { app } = target('static-token');
    await s.request('POST', 'cloud/static-roles/tk', { body: { application_object_id: app.objectId } });
    const r = await s.request('POST', 'cloud/static-creds/tk/token', { body: { scope: `${world.emu.graphUrl}/.default` } });
    expect(r.status).toBe(200);
    expect(r.body.lease_id).toBe('');
    const verified = await world.emu.tokens.verify(r.body.data.access_token, 'graph');
    expect(verified.ok).toBe(true);
    expect(verified.ok && verified.claims.appid).toBe(app.appId);
  });

  it.each([
    ['missing', {}],
    ['empty', { scope: '' }],
    ['a quote', { scope: 'https://x/.default"' }],
    ['a newline', { scope: 'https://x/.default\nhttps://y/.default' }],
    ['overlong', { scope: 'a'.repeat(1025) }],
  ])('a scope %s is a 400 naming "scope"', async (_label, body) => {
    const s = await server();
    const { app } = target(`static-token-${_label}`);
    await s.request('POST', 'cloud/static-roles/tk', { body: { application_object_id: app.objectId } });
    const r = await s.request('POST', 'cloud/static-creds/tk/token', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('"scope"');
  });
});

describe('failures are visible', () => {
  it('"role read, LIST cloud/rotation-failures, metrics" and a gauge of each role\'s seconds to expiry', async () => {
    const s = await server();
    const { app } = target('static-failing');
    const t0 = clock.now();
    await s.request('POST', 'cloud/static-roles/fl', { body: { application_object_id: app.objectId, rotation_period: '720h', rotation_grace_period: '1h' } });
    world.emu.faults.fail({ service: 'graph', path: /addPassword$/ }, 1000, 400);
    await advanceTo(t0 + PERIOD - 2 * HOUR);
    await vi.waitFor(async () => expect((await read(s, 'fl')).last_rotation_error).toBeDefined());
    const failures = await s.request('LIST', 'cloud/rotation-failures');
    expect(failures.body.data.keys).toEqual(['fl']);
    expect(failures.body.data.key_info.fl).toMatchObject({ kind: 'rotation', attempts: 1 });
    const scrape = parseScrape((await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: { 'x-vault-token': 'root' } })).body);
    expect(scrape.value('strongroom_cloud_static_roles_failing', { mount: 'cloud/' })).toBe(1);
    expect(scrape.value('strongroom_cloud_static_role_rotations_total', { mount: 'cloud/', result: 'failure' })).toBe(1);
    expect(scrape.value('strongroom_cloud_static_role_expiry_seconds', { mount: 'cloud/', role: 'fl' })).toBe(2 * 3600);

    world.emu.faults.clear();
    await advanceTo(Date.parse((await read(s, 'fl')).next_rotation));
    await vi.waitFor(async () => expect((await read(s, 'fl')).last_rotation_error).toBeUndefined());
    expect((await s.request('LIST', 'cloud/rotation-failures')).status).toBe(404);
  });
});
