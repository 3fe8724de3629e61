import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { MemoryStorage } from '../../src/core/storage/memory.ts';
import { CountingStorage } from '../support/counting-storage.ts';
import { startCollector } from '../support/audit.ts';
import { startFullServer } from '../support/full-server.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { parseScrape, type Scrape } from '../support/prometheus.ts';
import { testServers, type TestServer } from '../support/server.ts';
import { createIsolatedOu, startSlapd, stopSlapd, type IsolatedOu, type SlapdFacts } from '../support/slapd.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const facts = inject('slapd');

const pool = testServers();
const server = pool.start;
afterEach(() => pool.closeAll());

async function scrape(s: TestServer, token: string | null = 'root'): Promise<Scrape> {
  const r = await s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers: token ? { 'x-vault-token': token } : {} });
  expect(r.statusCode, r.body).toBe(200);
  return parseScrape(r.body);
}

async function tokenWith(s: TestServer, policy: string): Promise<string> {
  await ok(s, 'PUT', 'sys/policies/acl/metrics-test', { policy });
  return (await s.request('POST', 'auth/token/create', { body: { policies: ['metrics-test'] } })).body.auth.client_token;
}

describe('sys/metrics', () => {
  it('"is refused without a token (403) and to a token without read on sys/metrics; a token with it gets the Prometheus text"', async () => {
    const s = await server();
    const get = (headers: Record<string, string>) => s.app.inject({ method: 'GET', url: '/v1/sys/metrics?format=prometheus', headers });
    expect((await get({})).statusCode).toBe(403);
    const other = await tokenWith(s, 'path "sys/mounts" { capabilities = ["read"] }');
    expect((await get({ 'x-vault-token': other })).statusCode).toBe(403);
    const reader = await tokenWith(s, 'path "sys/metrics" { capabilities = ["read"] }');
    const r = await get({ 'x-vault-token': reader });
    expect(r.statusCode).toBe(200);
    expect(r.headers['content-type']).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(parseScrape(r.body).types.get('vault_core_handle_request')).toBe('SUMMARY');
  });

  it('"STRONGROOM_UNAUTHENTICATED_METRICS=true answers without a token"', async () => {
    const s = await server({ env: { STRONGROOM_UNAUTHENTICATED_METRICS: 'true' } });
    expect((await scrape(s, null)).types.has('strongroom_request_duration_seconds')).toBe(true);
  });

  it('"without format, Vault\'s JSON shape: Timestamp, Gauges, Counters and Samples, Vault\'s families under their dotted names"', async () => {
    const s = await server();
    await s.request('POST', 'auth/token/create', { body: { ttl: '1h' } });
    const r = await s.request('GET', 'sys/metrics');
    expect(r.status).toBe(200);
    expect(Object.keys(r.body)).toEqual(['Timestamp', 'Gauges', 'Counters', 'Samples']);
    expect(r.body.Timestamp).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC$/);
    expect(r.body.Gauges).toContainEqual({ Name: 'vault.expire.num_leases', Value: 1, Labels: {} });
    expect(r.body.Counters).toContainEqual(expect.objectContaining({
      Name: 'vault.token.creation', Count: 1, Labels: { namespace: 'root', auth_method: 'token', mount_point: 'auth/token/', creation_ttl: '1h', token_type: 'service' },
    }));
    expect(r.body.Samples).toContainEqual(expect.objectContaining({ Name: 'vault.core.handle_request', Count: expect.any(Number), Mean: expect.any(Number) }));
  });

  it('"an unknown format is a 400"', async () => {
    const s = await server();
    expect((await s.request('GET', 'sys/metrics?format=statsd')).status).toBe(400);
  });
});

describe('sys/metrics without a token (cheap for strangers)', () => {
  // Each row: how many leases the store holds; an unauthenticated scrape's storage work must not depend on it.
  it.each([[20], [400]])('"no unauthenticated request does work that grows with stored data": with %i leases, 20 scrapes without a token read storage at most once per interval', async (leases) => {
    const counted = new CountingStorage(new MemoryStorage());
    const s = await server({ storageInstance: counted, env: { STRONGROOM_UNAUTHENTICATED_METRICS: 'true' } });
    await ok(s, 'POST', 'sys/mounts/dir', { type: 'ldap' });
    for (let i = 0; i < leases; i++) await s.request('POST', 'auth/token/create', { body: { ttl: '1h' } });
    const first = await scrape(s, null);
    expect(first.value('vault_expire_num_leases')).toBe(leases);
    counted.reset();
    for (let i = 0; i < 20; i++) expect((await scrape(s, null)).value('vault_expire_num_leases')).toBe(leases);
    expect(counted.requestReads()).toEqual([]);
  });

  it('"cached for the scrape interval" applies to strangers only: a token\'s scrape reads afresh, and a stranger then sees that reading', async () => {
    const s = await server({ storageInstance: new CountingStorage(new MemoryStorage()), env: { STRONGROOM_UNAUTHENTICATED_METRICS: 'true' } });
    expect((await scrape(s, null)).value('vault_expire_num_leases')).toBe(0);
    await s.request('POST', 'auth/token/create', { body: { ttl: '1h' } });
    // Within the interval a stranger gets the last reading, not a new count.
    expect((await scrape(s, null)).value('vault_expire_num_leases')).toBe(0);
    expect((await scrape(s)).value('vault_expire_num_leases')).toBe(1);
    expect((await scrape(s, null)).value('vault_expire_num_leases')).toBe(1);
  });
});

describe('the core\'s families', () => {
  it('"requests by mount, operation and status, their duration, and Vault\'s vault_core_handle_request"', async () => {
    const s = await server();
    await s.request('GET', 'sys/mounts');
    await s.request('GET', 'sys/mounts');
    await s.request('GET', 'sys/no-such-path');
    await s.request('LIST', 'sys/policies/acl');
    await s.request('GET', 'nowhere/x');
    const m = await scrape(s);
    const count = (labels: Record<string, string>) => m.value('strongroom_request_duration_seconds_count', labels);
    expect(count({ mount: 'sys/', operation: 'read', status: '200' })).toBeGreaterThanOrEqual(2);
    expect(count({ mount: 'sys/', operation: 'read', status: '404' })).toBe(1);
    expect(count({ mount: 'sys/', operation: 'list', status: '200' })).toBe(1);
    // No mount matched: the label is the fixed "none", not the path the client sent.
    expect(count({ mount: 'none', operation: 'read', status: '404' })).toBe(1);
    expect(m.samples.some((x) => x.labels.mount === 'nowhere/')).toBe(false);
    expect(m.value('vault_core_handle_request_count')).toBeGreaterThanOrEqual(5);
    expect(m.value('vault_core_handle_request', { quantile: '0.99' })).toBeGreaterThan(0);
    // A node of its own runs the background work.
    expect(m.value('strongroom_leader')).toBe(1);
  });

  it('"a status a client chooses is reported by its class (sys/health?activecode=599 is 5xx)"', async () => {
    const s = await server();
    expect((await s.request('GET', 'sys/health?activecode=599')).status).toBe(599);
    expect((await scrape(s)).value('strongroom_request_duration_seconds_count', { mount: 'sys/', status: '5xx' })).toBe(1);
  });

  it('"vault_token_creation counts tokens with Vault\'s labels, creation_ttl in Vault\'s buckets"', async () => {
    const s = await server();
    for (const ttl of ['30s', '90m', '90m', '5d']) await ok(s, 'POST', 'auth/token/create', { ttl });
    const m = await scrape(s);
    const created = (creation_ttl: string) => m.value('vault_token_creation', { namespace: 'root', auth_method: 'token', mount_point: 'auth/token/', creation_ttl, token_type: 'service' });
    expect([created('1m'), created('2h'), created('7d')]).toEqual([1, 2, 1]);
  });

  it('"leases: created and revoked by mount, failed revocations, irrevocable ones, and vault_expire_num_leases"', async () => {
    const clock = new FakeClock();
    const probes = new Map<string, TestBackendProbe>();
    const s = await server({ clock, backends: { secret: { test: testBackend(probes) }, auth: {} }, env: { STRONGROOM_REVOKE_MAX_ATTEMPTS: '1' } });
    await ok(s, 'POST', 'sys/mounts/leased', { type: 'test' });
    const issue = async (name: string) => (await s.request('GET', `leased/creds/${name}?ttl=60`)).body.lease_id as string;
    const revoked = await issue('a');
    await issue('b');
    await ok(s, 'PUT', 'sys/leases/revoke', { lease_id: revoked });
    probes.get('leased/')!.failRevocations = true;
    await clock.advance(61_000);
    // The root token has no lease; the lease of b failed its only attempt and stays, irrevocable.
    await vi.waitFor(async () => expect((await scrape(s)).value('vault_expire_num_irrevocable_leases')).toBe(1));
    const m = await scrape(s);
    expect(m.value('vault_expire_num_leases')).toBe(1);
    expect(m.value('strongroom_leases_created_total', { mount: 'leased/' })).toBe(2);
    expect(m.value('strongroom_lease_revocations_total', { mount: 'leased/', result: 'success' })).toBe(1);
    expect(m.value('strongroom_lease_revocations_total', { mount: 'leased/', result: 'failure' })).toBe(1);
    expect(m.value('vault_expire_revoke_count')).toBe(1);
  });

  it('"storage calls are timed under Vault\'s names for the backend, and Node\'s process collectors are there"', async () => {
    const s = await server({ storage: 'sqlite' });
    const m = await scrape(s);
    for (const op of ['get', 'list', 'transaction']) expect(m.value(`vault_sqlite_${op}_count`), op).toBeGreaterThan(0);
    expect(m.types.get('vault_sqlite_get')).toBe('SUMMARY');
    expect(m.value('process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(m.value('nodejs_heap_size_total_bytes')).toBeGreaterThan(0);
  });

  it('"audit device failures: Vault\'s totals, and per device"', async () => {
    const s = await server();
    // A device that writes keeps requests answered (one is enough); the other fails every entry.
    await ok(s, 'PUT', 'sys/audit/discard', { type: 'file', options: { file_path: 'discard' } });
    // A collector that dies once the device is enabled: every later write to it fails.
    const collector = await startCollector();
    await ok(s, 'PUT', 'sys/audit/full', { type: 'socket', options: { address: collector.address } });
    await collector.kill();
    expect((await s.request('GET', 'sys/mounts')).status).toBe(200);
    const m = await scrape(s);
    expect(m.value('vault_audit_log_request_failure')).toBeGreaterThanOrEqual(1);
    expect(m.value('vault_audit_log_response_failure')).toBeGreaterThanOrEqual(1);
    expect(m.value('strongroom_audit_log_failures_total', { device: 'full/', entry: 'request' })).toBeGreaterThanOrEqual(1);
    expect(m.value('strongroom_audit_log_failures_total', { device: 'discard/', entry: 'request' })).toBe(0);
  });
});

describe('the ldap engine', () => {
  let ou: IsolatedOu;
  beforeEach(async () => {
    ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 3 });
  });
  afterEach(async () => {
    await pool.closeAll();
    await ou.cleanup();
  });

  it('"library gauges follow check-outs and check-ins; a check-out refused for want of an account is counted for its set"', async () => {
    const s = await server();
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: 'svc0,svc1' });
    const accounts = async () => {
      const m = await scrape(s);
      return ['available', 'lent', 'returning'].map((state) => m.value('strongroom_ldap_library_accounts', { mount: 'ldap/', set: 'team', state }));
    };
    expect(await accounts()).toEqual([2, 0, 0]);
    await ok(s, 'POST', 'ldap/library/team/check-out');
    expect(await accounts()).toEqual([1, 1, 0]);
    await ok(s, 'POST', 'ldap/library/team/check-out');
    expect(await accounts()).toEqual([0, 2, 0]);
    expect((await s.request('POST', 'ldap/library/team/check-out')).status).toBe(400);
    expect((await scrape(s)).value('strongroom_ldap_library_checkouts_refused_total', { mount: 'ldap/', set: 'team', reason: 'none_free' })).toBe(1);
    // A wait that ends with none lent: refused for that reason, and timed.
    expect((await s.request('POST', 'ldap/library/team/check-out', { body: { wait: '1s' } })).status).toBe(400);
    const after = await scrape(s);
    expect(after.value('strongroom_ldap_library_checkouts_refused_total', { mount: 'ldap/', set: 'team', reason: 'wait_expired' })).toBe(1);
    expect(after.value('strongroom_ldap_library_wait_seconds_count', { mount: 'ldap/' })).toBe(1);
    expect(after.value('strongroom_ldap_library_waiters', { mount: 'ldap/', set: 'team' })).toBe(0);
    await ok(s, 'POST', 'ldap/library/manage/team/check-in', { service_account_names: 'svc0' });
    expect(await accounts()).toEqual([1, 1, 0]);
  });

  it('"dynamic credentials outstanding follow issue and revocation"', async () => {
    const s = await server();
    await configure(s, facts, ou);
    const userDn = `cn={{.Username}},${ou.usersDn}`;
    await ok(s, 'POST', 'ldap/role/dyn', {
      creation_ldif: `dn: ${userDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
      deletion_ldif: `dn: ${userDn}\nchangetype: delete\n`,
    });
    const outstanding = async () => (await scrape(s)).value('strongroom_ldap_dynamic_credentials', { mount: 'ldap/' });
    expect(await outstanding()).toBe(0);
    const lease = (await s.request('GET', 'ldap/creds/dyn')).body.lease_id;
    expect(await outstanding()).toBe(1);
    await ok(s, 'PUT', 'sys/leases/revoke', { lease_id: lease });
    expect(await outstanding()).toBe(0);
  });

  describe('against a directory of the test\'s own, stopped halfway', () => {
    let own: SlapdFacts;
    let ownOu: IsolatedOu;
    beforeAll(async () => {
      own = await startSlapd();
      ownOu = await createIsolatedOu(own, { users: 1 });
    });
    afterAll(async () => {
      await stopSlapd(own);
    });

    it('"a rotation that succeeds and rotate-root count successes; against the stopped directory they count failures, the role fails and becomes overdue"', async () => {
      const clock = new FakeClock(Date.now());
      const s = await server({ clock });
      await configure(s, own, ownOu);
      await ok(s, 'POST', 'ldap/static-role/app', { username: ownOu.users[0]!.name, rotation_period: '1h' });
      await ok(s, 'POST', 'ldap/rotate-role/app');
      await ok(s, 'POST', 'ldap/rotate-root');
      let m = await scrape(s);
      const rotations = (result: string) => m.value('strongroom_ldap_static_role_rotations_total', { mount: 'ldap/', result });
      // The creation's rotation and rotate-role.
      expect(rotations('success')).toBe(2);
      expect(m.value('strongroom_rotate_root_total', { mount: 'ldap/', result: 'success' })).toBe(1);
      expect(m.value('strongroom_ldap_static_roles_failing', { mount: 'ldap/' })).toBe(0);
      expect(m.value('strongroom_ldap_static_role_rotation_overdue_seconds', { mount: 'ldap/' })).toBe(0);

      await stopSlapd(own);
      expect((await s.request('POST', 'ldap/rotate-role/app')).status).toBe(502);
      expect((await s.request('POST', 'ldap/rotate-root')).status).toBe(502);
      m = await scrape(s);
      expect(rotations('failure')).toBe(1);
      expect(m.value('strongroom_rotate_root_total', { mount: 'ldap/', result: 'failure' })).toBe(1);
      expect(m.value('strongroom_ldap_static_roles_failing', { mount: 'ldap/' })).toBe(1);

      // Overdue from the rotate-role that failed (a rotation asked for and not done), and still failing two hours later.
      await clock.advance(2 * 3600_000);
      await vi.waitFor(async () => {
        m = await scrape(s);
        expect(m.value('strongroom_ldap_static_role_rotation_overdue_seconds', { mount: 'ldap/' })).toBe(7200);
        expect(rotations('failure')).toBeGreaterThan(1);
      });
      expect(rotations('success')).toBe(2);
    });
  });

  it('"label values come from bounded sets: 1,000 more roles add no series"', async () => {
    const s = await server();
    // Without a config only roles that skip their import rotation can be made, which touches no directory.
    const create = (i: number) => ok(s, 'POST', `ldap/static-role/role-${i}`, { username: `user-${i}`, rotation_period: '1h', skip_import_rotation: true });
    const tokenRole = (i: number) => ok(s, 'POST', `auth/token/roles/role-${i}`, { allowed_policies: 'default' });
    await create(0);
    await tokenRole(0);
    // The first scrape's own request is counted after it answers: the second one already shows its series.
    await scrape(s);
    const before = await scrape(s);
    for (let i = 1; i < 1000; i += 50) await Promise.all(Array.from({ length: 50 }, (_, j) => Promise.all([create(i + j), tokenRole(i + j)])));
    const after = await scrape(s);
    expect(after.value('strongroom_ldap_static_roles', { mount: 'ldap/' })).toBe(1001);
    // Node's own collectors name what the process holds (handle types, GC kinds), which varies on its own.
    const ours = (m: Scrape) => [...m.series()].filter((x) => /^(strongroom|vault)_/.test(x));
    expect(ours(after).filter((x) => !ours(before).includes(x))).toEqual([]);
    expect(after.samples.some((x) => Object.values(x.labels).some((v) => v.includes('role-')))).toBe(false);
  });
});

describe('the cloud mounts', () => {
  it('"provider calls by API and status, throttling and retries, credentials outstanding; logins by mount and result, refusals by reason"', async () => {
    const full = await startFullServer();
    try {
      const s = full.server;
      await ok(s, 'POST', 'cloud/config', full.cloudConfig());
      await ok(s, 'POST', 'cloud/roles/reader', { azure_roles: full.readerRoles(), ttl: '1h' });
      full.world.emu.faults.throttle({ service: 'graph', method: 'POST', path: '/applications' }, 1);
      const creds = await s.request('GET', 'cloud/creds/reader');
      expect(creds.status, JSON.stringify(creds.body)).toBe(200);
      let m = await scrape(s);
      const calls = (labels: Record<string, string>) => m.samples.filter((x) => x.name === 'strongroom_cloud_provider_requests_total' && Object.entries(labels).every(([k, v]) => x.labels[k] === v)).reduce((n, x) => n + x.value, 0);
      expect(calls({ mount: 'cloud/', api: 'graph', status: '429' })).toBe(1);
      expect(m.value('strongroom_cloud_provider_retries_total', { mount: 'cloud/', api: 'graph', reason: 'throttled' })).toBe(1);
      expect(calls({ mount: 'cloud/', api: 'graph' })).toBeGreaterThan(2);
      expect(calls({ mount: 'cloud/', api: 'arm_authorization' })).toBeGreaterThan(0);
      expect(m.value('strongroom_cloud_credentials', { mount: 'cloud/' })).toBe(1);
      await ok(s, 'PUT', 'sys/leases/revoke', { lease_id: creds.body.lease_id });
      expect((await scrape(s)).value('strongroom_cloud_credentials', { mount: 'cloud/' })).toBe(0);

      await ok(s, 'POST', 'auth/cloud/config', full.authConfig());
      await ok(s, 'POST', 'auth/cloud/role/ci', { policies: ['default'], bound_service_principal_ids: [full.loginIdentity.principalId] });
      const login = (body: Record<string, unknown>) => s.request('POST', 'auth/cloud/login', { body, token: null });
      expect((await login({ role: 'ci', jwt: await full.mintLoginJwt() })).status).toBe(200);
      const elsewhere = await full.world.emu.miTokens.mint({ identity: full.loginIdentity, audience: 'https://elsewhere.example/' });
      expect((await login({ role: 'ci', jwt: elsewhere })).status).toBe(403);
      expect((await login({ role: 'nobody', jwt: await full.mintLoginJwt() })).status).toBe(400);
      m = await scrape(s);
      expect(m.value('strongroom_logins_total', { mount: 'auth/cloud/', result: 'success' })).toBe(1);
      expect(m.value('strongroom_logins_total', { mount: 'auth/cloud/', result: 'failure' })).toBe(2);
      expect(m.value('strongroom_cloud_login_failures_total', { mount: 'auth/cloud/', reason: 'jwt' })).toBe(1);
      expect(m.value('strongroom_cloud_login_failures_total', { mount: 'auth/cloud/', reason: 'unknown_role' })).toBe(1);
      expect(m.value('vault_core_handle_login_request_count')).toBe(3);
      expect(m.value('vault_token_creation', { auth_method: 'cloud', mount_point: 'auth/cloud/' })).toBe(1);
    } finally {
      await full.server.core.leases.idle();
      await full.close();
    }
  });
});
