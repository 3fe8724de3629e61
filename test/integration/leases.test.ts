import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

let s: TestServer;
const clock = new FakeClock();
const probes = new Map<string, TestBackendProbe>();
const probe = () => probes.get('leased/')!;

beforeAll(async () => {
  s = await startTestServer({ clock, backends: { secret: { test: testBackend(probes) }, auth: {} } });
  await s.request('POST', 'sys/mounts/leased', { body: { type: 'test', config: { default_lease_ttl: '1h', max_lease_ttl: '2h' } } });
});
afterAll(() => s.close());

const issue = async (name: string, query = '', token = 'root') => (await s.request('GET', `leased/creds/${name}${query}`, { token })).body;

describe('leases registered by the core', () => {
  it('"lease_id is <mount><path>/<random>; TTLs default to the mount and are clamped by its max"', async () => {
    const a = await issue('a');
    expect(a.lease_id).toMatch(/^leased\/creds\/a\/[A-Za-z0-9]{24}$/);
    expect(a).toMatchObject({ renewable: true, lease_duration: 3600 });
    expect((await issue('b', '?ttl=10h')).lease_duration).toBe(7200);
  });
});

describe('leases a backend stores before making its secret', () => {
  it('"the lease is the write-ahead record: stored before the secret is made, not stored twice, answered as usual"', async () => {
    const r = await s.request('GET', 'leased/early/first');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(probe().leaseStoredFirst).toBe(true);
    expect(r.body).toMatchObject({ lease_duration: 3600, renewable: true });
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id: r.body.lease_id } })).body.data.ttl).toBe(3600);
    expect((await s.request('LIST', 'sys/leases/lookup/leased/early/first/')).body.data.keys).toHaveLength(1);
  });

  it('"a handler that fails after storing its lease leaves no lease (and no revocation: it undid its own work)"', async () => {
    const revokedBefore = probe().revoked.length;
    const r = await s.request('GET', 'leased/early/failing?fail=true');
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual(['making the secret failed']);
    expect((await s.request('LIST', 'sys/leases/lookup/leased/early/failing/')).status).toBe(404);
    expect(probe().revoked.length).toBe(revokedBefore);
  });
});

describe('sys/leases/lookup', () => {
  it('"returns id, issue_time, expire_time, renewable, ttl; an unknown lease is 400 invalid lease"', async () => {
    const { lease_id } = await issue('look');
    const r = await s.request('PUT', 'sys/leases/lookup', { body: { lease_id } });
    expect(r.body.data).toMatchObject({ id: lease_id, renewable: true, ttl: 3600 });
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id: 'leased/creds/x/nope' } })).body.errors).toEqual(['invalid lease']);
    expect((await s.request('PUT', 'sys/leases/lookup', { body: {} })).status).toBe(400);
  });

  it('"LIST sys/leases/lookup/<prefix> lists lease ids (sudo)"', async () => {
    await issue('listed');
    expect((await s.request('LIST', 'sys/leases/lookup/leased/creds/listed/')).body.data.keys).toHaveLength(1);
  });
});

describe('sys/leases/renew', () => {
  it('"renew extends by the increment but never past the max TTL"', async () => {
    const { lease_id } = await issue('renew', '?max_ttl=5400');
    await clock.advance(600_000);
    const r = await s.request('PUT', 'sys/leases/renew', { body: { lease_id, increment: '1h' } });
    expect(r.body).toMatchObject({ lease_id, renewable: true, lease_duration: 3600 });
    await clock.advance(3_000_000);
    expect((await s.request('PUT', `sys/leases/renew/${lease_id}`, { body: { increment: '1h' } })).body.lease_duration).toBe(5400 - 3600);
  });
});

describe('lease expiry', () => {
  it('"an expired lease is revoked through its engine"', async () => {
    const { lease_id } = await issue('expiring', '?ttl=60');
    await clock.advance(61_000);
    expect(probe().revoked).toContain('expiring');
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id } })).status).toBe(400);
  });

  it('"a failing revocation is retried with backoff, then marked irrevocable and stays visible"', async () => {
    probe().failRevocations = true;
    const { lease_id } = await issue('stuck', '?ttl=60');
    await clock.advance(61_000);
    let look = await s.request('PUT', 'sys/leases/lookup', { body: { lease_id } });
    expect(look.status).toBe(200);
    await clock.advance(3 * 3600_000);
    look = await s.request('PUT', 'sys/leases/lookup', { body: { lease_id } });
    expect(look.body.data.revoke_error).toMatch(/^out of retries: the test engine was told to fail/);
    expect(look.body.data.renewable).toBe(false);
    probe().failRevocations = false;
    expect((await s.request('PUT', `sys/leases/revoke-force/${lease_id}`)).status).toBe(204);
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id } })).status).toBe(400);
  });

  it('"a revocation that fails once succeeds on a retry"', async () => {
    probe().failRevocations = true;
    await issue('flaky', '?ttl=60');
    await clock.advance(61_000);
    probe().failRevocations = false;
    await clock.advance(120_000);
    expect(probe().revoked).toContain('flaky');
  });
});

describe('sys/leases/revoke and revoke-prefix', () => {
  it('"revoke runs the engine now; an unknown lease is a 204 no-op"', async () => {
    const { lease_id } = await issue('explicit');
    expect((await s.request('PUT', 'sys/leases/revoke', { body: { lease_id } })).status).toBe(204);
    expect(probe().revoked).toContain('explicit');
    expect((await s.request('PUT', 'sys/leases/revoke', { body: { lease_id: 'leased/creds/none/x' } })).status).toBe(204);
  });

  it('"a lease changed in storage since this node issued it (by another node) is revoked as stored now"', async () => {
    const { lease_id } = await issue('issued-here');
    const key = `sys/expire/id/${lease_id}`;
    const stored = JSON.parse((await s.core.barrier.get(key))!.toString('utf8'));
    await s.core.barrier.put(key, Buffer.from(JSON.stringify({ ...stored, internal: { name: 'changed-elsewhere' } })));
    expect((await s.request('PUT', 'sys/leases/revoke', { body: { lease_id } })).status).toBe(204);
    expect(probe().revoked).toContain('changed-elsewhere');
    expect(probe().revoked).not.toContain('issued-here');
  });

  it('"revoke-prefix revokes every lease under the prefix"', async () => {
    await issue('pre1');
    await issue('pre1');
    expect((await s.request('PUT', 'sys/leases/revoke-prefix/leased/creds/pre1')).status).toBe(204);
    expect(probe().revoked.filter((n) => n === 'pre1')).toHaveLength(2);
  });

  it('"revoking a token revokes the leases issued with it"', async () => {
    const t = (await s.request('POST', 'auth/token/create', { body: { policies: ['root'] } })).body.auth.client_token;
    await issue('bytoken', '', t);
    await s.request('POST', 'auth/token/revoke', { body: { token: t } });
    expect(probe().revoked).toContain('bytoken');
  });

  it('"token expiry revokes the token and its leases"', async () => {
    const t = (await s.request('POST', 'auth/token/create', { body: { policies: ['root'], ttl: '5m' } })).body.auth.client_token;
    await issue('tokenexpiry', '', t);
    await clock.advance(6 * 60_000);
    expect(probe().revoked).toContain('tokenexpiry');
    expect((await s.request('GET', 'auth/token/lookup-self', { token: t })).status).toBe(403);
  });

  it('"disabling a mount revokes its leases and deletes its storage"', async () => {
    await s.request('POST', 'sys/mounts/temp', { body: { type: 'test' } });
    await s.request('POST', 'temp/data/k', { body: { value: 'v' } });
    await s.request('GET', 'temp/creds/gone');
    expect((await s.request('DELETE', 'sys/mounts/temp')).status).toBe(204);
    expect(probes.get('temp/')!.revoked).toEqual(['gone']);
    await s.request('POST', 'sys/mounts/temp', { body: { type: 'test' } });
    expect((await s.request('GET', 'temp/data/k')).status).toBe(404);
  });
});

describe('periodic jobs of a backend', () => {
  it('"a backend\'s periodic job runs on the injected clock and stops when the mount is disabled"', async () => {
    await s.request('POST', 'sys/mounts/ticking', { body: { type: 'test' } });
    const probe = probes.get('ticking/')!;
    await clock.advance(3 * 60_000 + 1);
    expect(probe.ticks).toBe(3);
    await s.request('DELETE', 'sys/mounts/ticking');
    await clock.advance(5 * 60_000);
    expect(probe.ticks).toBe(3);
  });
});
