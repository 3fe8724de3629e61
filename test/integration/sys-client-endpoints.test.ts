// The sys endpoints third-party Vault clients call (hvac, node-vault, the vault CLI, Terraform): health, init,
// host-info, capabilities and the UI mount listing, in Vault's shapes.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A memory store that can be told it has failed, as the SQLite store reports a dead writer. */
class FailingStorage extends MemoryStorage {
  failed: Error | undefined;
  override get failure(): Error | undefined {
    return this.failed;
  }
}

const clock = new FakeClock();
const storage = new FailingStorage();
let s: TestServer;

beforeAll(async () => {
  s = await startTestServer({ clock, listen: true, storageInstance: storage });
});
afterAll(() => s.close());

async function tokenWith(name: string, policy: string): Promise<string> {
  expect((await s.request('PUT', `sys/policies/acl/${name}`, { body: { policy } })).status).toBe(204);
  return (await s.request('POST', 'auth/token/create', { body: { policies: [name] } })).body.auth.client_token;
}

describe('sys/health', () => {
  it('"Vault\'s full field set, raw and without a token: initialized, sealed, standby, performance_standby, replication modes, server_time_utc, version, enterprise false, cluster_name, cluster_id, echo_duration_ms, clock_skew_ms"', async () => {
    const r = await s.request('GET', 'sys/health', { token: null });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      initialized: true, sealed: false, standby: false, performance_standby: false,
      replication_performance_mode: 'disabled', replication_dr_mode: 'disabled',
      server_time_utc: Math.floor(clock.now() / 1000), version: expect.any(String), enterprise: false,
      cluster_name: 'strongroom', cluster_id: expect.stringMatching(UUID), echo_duration_ms: 0, clock_skew_ms: 0, replication_primary_canary_age_ms: 0,
    });
  });

  it('"cluster_id is a UUID stored once at initialisation: the same on every answer and after a restart"', async () => {
    const dataDir = mkdtempSync(join(os.tmpdir(), 'strongroom-health-'));
    onTestFinished(() => rmSync(dataDir, { recursive: true, force: true }));
    const unsealKey = randomBytes(32).toString('base64');
    const first = await startTestServer({ storage: 'sqlite', dataDir, unsealKey });
    const id = (await first.request('GET', 'sys/health')).body.cluster_id;
    expect((await first.request('GET', 'sys/health')).body.cluster_id).toBe(id);
    await first.close();
    const again = await startTestServer({ storage: 'sqlite', dataDir, unsealKey });
    expect((await again.request('GET', 'sys/health')).body.cluster_id).toBe(id);
    await again.close();
    expect(id).not.toBe((await s.request('GET', 'sys/health')).body.cluster_id);
  });

  it('"activecode sets the status of this (always active) node; standbyok, perfstandbyok and the codes of states it is never in are accepted"', async () => {
    expect((await s.request('GET', 'sys/health?activecode=299')).status).toBe(299);
    const all = 'standbyok=true&perfstandbyok=1&standbycode=200&drsecondarycode=200&performancestandbycode=200&haunhealthycode=200&removedcode=200&sealedcode=200&uninitcode=200';
    const r = await s.request('GET', `sys/health?${all}`);
    expect(r.status).toBe(200);
    expect(r.body.initialized).toBe(true);
  });

  it('"a bad code (not an integer, outside 100-599) or a bad standbyok is a 400 naming the parameter"', async () => {
    for (const [query, name] of [['activecode=abc', 'activecode'], ['sealedcode=99', 'sealedcode'], ['uninitcode=600', 'uninitcode'], ['standbycode=2.5', 'standbycode'], ['standbyok=maybe', 'standbyok'], ['perfstandbyok=2', 'perfstandbyok']]) {
      const r = await s.request('GET', `sys/health?${query}`, { token: null });
      expect(r.status, query).toBe(400);
      expect(r.body.errors[0], query).toMatch(new RegExp(`^invalid value for field "${name}": `));
    }
  });

  it('"HEAD answers the status with no body"', async () => {
    for (const [query, status] of [['', 200], ['?activecode=299', 299], ['?sealedcode=1', 400]] as const) {
      const res = await fetch(`${s.url}/v1/sys/health${query}`, { method: 'HEAD' });
      expect(res.status, query).toBe(status);
      expect(await res.text(), query).toBe('');
    }
  });

  it('"a failed store answers 503 whatever activecode asks: no parameter turns it into success"', async () => {
    storage.failed = new Error('the writer died');
    try {
      const r = await s.request('GET', 'sys/health?activecode=200&standbyok=true', { token: null });
      expect(r.status).toBe(503);
      expect(r.body).toMatchObject({ initialized: true, sealed: false });
    } finally {
      storage.failed = undefined;
    }
  });
});

describe('sys/init', () => {
  it('"GET answers {initialized: true} raw and without a token"', async () => {
    const r = await s.request('GET', 'sys/init', { token: null });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ initialized: true });
  });

  it('"PUT is a 400 already initialized, as Vault answers on an initialised server"', async () => {
    const r = await s.request('PUT', 'sys/init', { token: null, body: { secret_shares: 1, secret_threshold: 1 } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['Strongroom is already initialized']);
  });
});

describe('sys/host-info', () => {
  it('"Vault\'s shape: cpu, cpu_times, disk, host, memory and timestamp of this host"', async () => {
    const r = await s.request('GET', 'sys/host-info');
    expect(r.status).toBe(200);
    const d = r.body.data;
    expect(Object.keys(d).sort()).toEqual(['cpu', 'cpu_times', 'disk', 'host', 'memory', 'timestamp']);
    expect(d.cpu).toHaveLength(os.cpus().length);
    expect(d.cpu[0]).toMatchObject({ cpu: 0, modelName: os.cpus()[0].model, cores: 1, flags: [] });
    expect(d.cpu_times[0]).toMatchObject({ cpu: 'cpu0', user: expect.any(Number), system: expect.any(Number), idle: expect.any(Number) });
    expect(d.disk[0]).toMatchObject({ path: '/', total: expect.any(Number), free: expect.any(Number), used: expect.any(Number), usedPercent: expect.any(Number) });
    expect(d.disk[0].total).toBeGreaterThan(0);
    expect(d.host).toMatchObject({ hostname: os.hostname(), os: process.platform, kernelVersion: os.release(), kernelArch: os.machine() });
    expect(d.memory).toMatchObject({ total: os.totalmem(), used: d.memory.total - d.memory.available });
    expect(d.timestamp).toBe(new Date(clock.now()).toISOString());
  });

  it('"needs a token with read on sys/host-info"', async () => {
    expect((await s.request('GET', 'sys/host-info', { token: null })).status).toBe(403);
    expect((await s.request('GET', 'sys/host-info', { token: await tokenWith('nohost', 'path "sys/mounts" { capabilities = ["read"] }') })).status).toBe(403);
    expect((await s.request('GET', 'sys/host-info', { token: await tokenWith('host', 'path "sys/host-info" { capabilities = ["read"] }') })).status).toBe(200);
  });
});

const READER = `
path "ldap/static-role/*" { capabilities = ["read", "list"] }
path "ldap/static-role/secret" { capabilities = ["deny"] }
`;

describe('sys/capabilities', () => {
  it('"a token\'s capabilities on each path, in `capabilities` when one path is asked, and copied to the top level"', async () => {
    const token = await tokenWith('reader', READER);
    const r = await s.request('POST', 'sys/capabilities', { body: { token, paths: ['ldap/static-role/app', 'ldap/static-role/secret', 'cloud/roles/x'] } });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ 'ldap/static-role/app': ['list', 'read'], 'ldap/static-role/secret': ['deny'], 'cloud/roles/x': ['deny'] });
    expect(r.body['ldap/static-role/app']).toEqual(['list', 'read']);
    const one = await s.request('POST', 'sys/capabilities', { body: { token, path: 'ldap/static-role/app' } });
    expect(one.body.data).toEqual({ 'ldap/static-role/app': ['list', 'read'], capabilities: ['list', 'read'] });
    expect((await s.request('POST', 'sys/capabilities', { body: { token: 'root', paths: 'sys/remount' } })).body.data.capabilities).toEqual(['root']);
  });

  it('"paths are canonicalised as a request would be: another spelling of a denied name is denied, one no request could use is deny"', async () => {
    const token = await tokenWith('reader', READER);
    const r = await s.request('POST', 'sys/capabilities', { body: { token, paths: ['ldap/static-role/SECRET', '/ldap/static-role/Secret', 'ldap/static-role/APP', 'ldap/static-role/a//b', 'ldap/static-role/../x'] } });
    expect(r.body.data).toEqual({
      'ldap/static-role/SECRET': ['deny'], '/ldap/static-role/Secret': ['deny'], 'ldap/static-role/APP': ['list', 'read'],
      'ldap/static-role/a//b': ['deny'], 'ldap/static-role/../x': ['deny'],
    });
    // What a request with that spelling meets.
    expect((await s.request('GET', 'ldap/static-role/SECRET', { token })).status).toBe(403);
  });

  it('"a missing or unknown token is a 400 naming the field; paths are required"', async () => {
    expect((await s.request('POST', 'sys/capabilities', { body: { paths: ['x'] } })).body.errors).toEqual(['missing required field "token"']);
    expect((await s.request('POST', 'sys/capabilities', { body: { token: 'hvs.nothing', paths: ['x'] } })).body.errors).toEqual(['invalid value for field "token": invalid token']);
    expect((await s.request('POST', 'sys/capabilities', { body: { token: 'root' } })).body.errors).toEqual(['missing required field "paths": paths must be supplied']);
  });
});

describe('sys/capabilities-accessor', () => {
  it('"the capabilities of the token an accessor names, canonicalised the same way"', async () => {
    const created = (await s.request('POST', 'auth/token/create', { body: { policies: ['reader'] } })).body.auth;
    await tokenWith('reader', READER);
    const r = await s.request('POST', 'sys/capabilities-accessor', { body: { accessor: created.accessor, paths: ['ldap/static-role/App', 'ldap/static-role/Secret'] } });
    expect(r.body.data).toEqual({ 'ldap/static-role/App': ['list', 'read'], 'ldap/static-role/Secret': ['deny'] });
  });

  it('"an unknown accessor, or one whose token was revoked, is a 400 naming the field"', async () => {
    const created = (await s.request('POST', 'auth/token/create', { body: { policies: ['reader'] } })).body.auth;
    expect((await s.request('POST', 'auth/token/revoke-accessor', { body: { accessor: created.accessor } })).status).toBe(204);
    for (const accessor of [created.accessor, 'nothing']) {
      const r = await s.request('POST', 'sys/capabilities-accessor', { body: { accessor, paths: ['x'] } });
      expect(r.status).toBe(400);
      expect(r.body.errors).toEqual(['invalid value for field "accessor": invalid accessor']);
    }
  });
});

describe('sys/capabilities-self', () => {
  it('"the calling token\'s capabilities, canonicalised as requests are (allowed by the default policy)"', async () => {
    const token = await tokenWith('reader', READER);
    const r = await s.request('POST', 'sys/capabilities-self', { token, body: { paths: ['ldap/static-role/SECRET', 'ldap/static-role/app'] } });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ 'ldap/static-role/SECRET': ['deny'], 'ldap/static-role/app': ['list', 'read'] });
  });
});

describe('sys/internal/ui/mounts', () => {
  it('"without a token only mounts tuned listing_visibility=unauth are listed (none here)"', async () => {
    const r = await s.request('GET', 'sys/internal/ui/mounts', { token: null });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ secret: {}, auth: {} });
  });

  it('"with a token: the mounts it has any capability below, with their full info, and no grant on this path needed"', async () => {
    const token = await tokenWith('reader', READER);
    const r = await s.request('GET', 'sys/internal/ui/mounts', { token });
    expect(r.status).toBe(200);
    const mounts = (await s.request('GET', 'sys/mounts')).body.data;
    expect(r.body.data.secret['ldap/']).toEqual(mounts['ldap/']);
    expect(r.body.data.secret).not.toHaveProperty('cloud/');
    // The default policy's own paths make sys/, identity/ and auth/token/ usable.
    expect(Object.keys(r.body.data.secret).sort()).toEqual(['identity/', 'ldap/', 'sys/']);
    expect(Object.keys(r.body.data.auth)).toEqual(['token/']);
    const root = await s.request('GET', 'sys/internal/ui/mounts');
    expect(Object.keys(root.body.data.secret).sort()).toEqual(Object.keys(mounts).sort());
    expect(Object.keys(root.body.data.auth).sort()).toEqual(Object.keys((await s.request('GET', 'sys/auth')).body.data).sort());
  });
});

describe('sys/internal/ui/mounts/:path', () => {
  it('"the mount a path belongs to, with its path and type, for a token with access below it"', async () => {
    const token = await tokenWith('reader', READER);
    const r = await s.request('GET', 'sys/internal/ui/mounts/ldap/static-role/app', { token });
    expect(r.status).toBe(200);
    expect(r.body.data).toMatchObject({ path: 'ldap/', type: 'ldap', accessor: expect.stringMatching(/^ldap_/), options: {} });
    expect((await s.request('GET', 'sys/internal/ui/mounts/auth/token/lookup-self', { token })).body.data).toMatchObject({ path: 'auth/token/', type: 'token' });
  });

  it('"403 with one message for a mount without access, an unknown mount, or no token"', async () => {
    const token = await tokenWith('reader', READER);
    for (const [path, t] of [['cloud/roles/x', token], ['nothing/here', token], ['ldap/static-role/app', null]] as const) {
      const r = await s.request('GET', `sys/internal/ui/mounts/${path}`, { token: t });
      expect(r.status, path).toBe(403);
      expect(r.body.errors, path).toEqual([`preflight capability check returned 403, please ensure client's policies grant access to path "${path}"`]);
    }
  });
});
