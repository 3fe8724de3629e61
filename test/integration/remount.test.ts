// sys/remount: a mount moves with its data, config, leases and login tokens, against real slapd objects.
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { field } from '../../src/core/fields.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';
import { backendTypes } from '../../src/engines.ts';
import { canBind, createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, ok } from '../support/ldap-engine.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const facts = inject('slapd');

/** An auth method whose login answers any name: the token a remount of `auth/<x>` must keep working. */
const loginBackend: BackendFactory = () => ({
  paths: [definePath({
    pattern: 'login',
    description: 'Test login.',
    unauthenticated: true,
    fields: { name: field.string('Who logs in.') },
    operations: {
      update: async (req) => ({ auth: { policies: ['default'], displayName: req.data.name ?? 'anon', metadata: {}, ttl: 3600, maxTtl: 0, alias: { name: req.data.name ?? 'anon' } } }),
    },
  })],
});

const probes = new Map<string, TestBackendProbe>();
let clock: FakeClock;
let s: TestServer;
let ou: IsolatedOu;

beforeEach(async () => {
  clock = new FakeClock(Date.now());
  s = await startTestServer({
    clock,
    backends: { secret: { ...backendTypes.secret, test: testBackend(probes) }, auth: { ...backendTypes.auth, testlogin: loginBackend } },
  });
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 2 });
});
afterEach(async () => {
  await s.close();
  await ou.cleanup();
});

const remount = (from: string, to: string, token = 'root') => s.request('POST', 'sys/remount', { body: { from, to }, token });

function dynamicRole(o: IsolatedOu): Record<string, string> {
  const dn = `cn={{.Username}},${o.usersDn}`;
  return {
    creation_ldif: `dn: ${dn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
    deletion_ldif: `dn: ${dn}\nchangetype: delete\n`,
  };
}

describe('sys/remount', () => {
  it('"moves an ldap mount with its static role, dynamic lease and library loan: static creds read at the new path, the lease renews and revokes at its new id, check-in works, the old path is 404"', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '24h' });
    const staticBefore = await cred(s, 'app');
    await ok(s, 'POST', 'ldap/role/dyn', dynamicRole(ou));
    const dyn = (await s.request('GET', 'ldap/creds/dyn')).body;
    expect(dyn.lease_id).toMatch(/^ldap\/creds\/dyn\/\w{24}$/);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc0'], ttl: '1h' });
    const loan = (await s.request('POST', 'ldap/library/team/check-out', { body: {} })).body;
    expect(loan.data.service_account_name).toBe('svc0');

    const r = await remount('ldap', 'ldap-eu');
    expect(r.status, JSON.stringify(r.body)).toBe(200);

    expect(await cred(s, 'app', 'ldap-eu')).toEqual(staticBefore);
    expect((await s.request('GET', 'ldap/static-cred/app')).status).toBe(404);
    expect((await s.request('GET', 'sys/mounts/ldap-eu')).body.data.type).toBe('ldap');

    const dynId = dyn.lease_id.replace(/^ldap\//, 'ldap-eu/');
    const lookup = await s.request('PUT', 'sys/leases/lookup', { body: { lease_id: dynId } });
    expect(lookup.body.data.id).toBe(dynId);
    expect((await s.request('LIST', 'sys/leases/lookup/ldap/creds/dyn/')).status).toBe(404);
    const renewed = await s.request('PUT', 'sys/leases/renew', { body: { lease_id: dynId, increment: 600 } });
    expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);
    expect(renewed.body).toMatchObject({ lease_id: dynId, lease_duration: 600 });
    const userDn = dyn.data.distinguished_names[0];
    expect(await readEntry(facts, userDn)).toBeDefined();
    expect((await s.request('PUT', 'sys/leases/revoke', { body: { lease_id: dynId } })).status).toBe(204);
    expect(await readEntry(facts, userDn)).toBeUndefined();

    const loanId = loan.lease_id.replace(/^ldap\//, 'ldap-eu/');
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id: loanId } })).status).toBe(200);
    const checkIn = await s.request('POST', 'ldap-eu/library/team/check-in', { body: {} });
    expect(checkIn.body.data).toEqual({ check_ins: ['svc0'] });
    expect((await s.request('PUT', 'sys/leases/lookup', { body: { lease_id: loanId } })).body.errors).toEqual(['invalid lease']);
    expect(await canBind(facts.url, ou.serviceAccounts[0].dn, loan.data.password)).toBe(false);
  });

  it('"a library loan whose lease expires after the move is checked in: the engine still knows the lease by the id it was issued under"', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/library/team', { service_account_names: ['svc1'], ttl: '1h' });
    const loan = (await s.request('POST', 'ldap/library/team/check-out', { body: {} })).body;
    expect((await remount('ldap', 'ldap-eu')).status).toBe(200);

    await clock.advance(3600_000 + 1000);
    await s.core.leases.idle();
    expect((await s.request('GET', 'ldap-eu/library/team/status')).body.data).toEqual({ svc1: { available: true }, waiters: 0 });
    expect(await s.core.leases.get(loan.lease_id.replace(/^ldap\//, 'ldap-eu/'))).toBeUndefined();
    expect(await canBind(facts.url, ou.serviceAccounts[1].dn, loan.data.password)).toBe(false);
  });

  it('"moves auth/x with a live login token: the token still works, its lease moved to auth/y and renews there, and logins answer at the new path only"', async () => {
    await ok(s, 'POST', 'sys/auth/x', { type: 'testlogin' });
    const login = (await s.request('POST', 'auth/x/login', { token: null, body: { name: 'app' } })).body.auth;
    const salted = s.core.tokens.salt(login.client_token);
    expect(await s.core.leases.get(`auth/x/login/${salted}`)).toBeDefined();

    expect((await remount('auth/x', 'auth/y')).status).toBe(200);

    const self = await s.request('GET', 'auth/token/lookup-self', { token: login.client_token });
    expect(self.status).toBe(200);
    expect(self.body.data.path).toBe('auth/y/login');
    expect((await s.request('LIST', 'sys/leases/lookup/auth/y/login/')).body.data.keys).toEqual([salted]);
    expect((await s.request('LIST', 'sys/leases/lookup/auth/x/login/')).status).toBe(404);

    await clock.advance(1800_000);
    const renewed = await s.request('POST', 'auth/token/renew-self', { token: login.client_token, body: { increment: 3600 } });
    expect(renewed.status, JSON.stringify(renewed.body)).toBe(200);
    expect((await s.core.leases.get(`auth/y/login/${salted}`))!.expireTime).toBe(clock.now() + 3600_000);

    expect((await s.request('POST', 'auth/x/login', { body: { name: 'app' } })).status).toBe(404);
    expect((await s.request('POST', 'auth/y/login', { token: null, body: { name: 'app' } })).status).toBe(200);
    expect((await s.request('POST', 'auth/token/revoke-self', { token: login.client_token })).status).toBe(204);
    expect(await s.core.leases.get(`auth/y/login/${salted}`)).toBeUndefined();
  });

  it('"waits for a lease revocation under way before moving; an id handed out before the move still names its lease, and renewing it answers the new id"', async () => {
    await ok(s, 'POST', 'sys/mounts/held', { type: 'test' });
    const revoking = (await s.request('GET', 'held/creds/one')).body.lease_id;
    const kept = (await s.request('GET', 'held/creds/two')).body.lease_id;
    let open!: () => void;
    probes.get('held/')!.revokeGate = new Promise<void>((resolve) => (open = resolve));
    const revocation = s.request('PUT', 'sys/leases/revoke', { body: { lease_id: revoking } });
    await expect.poll(() => probes.get('held/')!.revoking).toBe(1);

    let moved = false;
    const move = remount('held', 'moved').then((r) => { moved = true; return r; });
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(moved).toBe(false);
    open();
    expect((await revocation).status).toBe(204);
    expect((await move).status).toBe(200);
    expect(probes.get('held/')!.revoked).toEqual(['one']);
    expect(await s.core.leases.get(revoking.replace(/^held\//, 'moved/'))).toBeUndefined();

    const renewed = await s.request('PUT', 'sys/leases/renew', { body: { lease_id: kept, increment: 60 } });
    expect(renewed.body.lease_id).toBe(kept.replace(/^held\//, 'moved/'));
    expect((await s.request('PUT', 'sys/leases/revoke', { body: { lease_id: renewed.body.lease_id } })).status).toBe(204);
    expect(probes.get('moved/')!.revoked).toEqual(['two']);
  });

  it('"answers a migration_id whose status (sys/remount/status/:id) is success at once"', async () => {
    await ok(s, 'POST', 'sys/mounts/t1', { type: 'test' });
    const r = await remount('t1/', '/t2');
    expect(r.body.data.migration_id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    const status = await s.request('GET', `sys/remount/status/${r.body.data.migration_id}`);
    expect(status.body.data).toEqual({ migration_id: r.body.data.migration_id, migration_info: { source_mount: 't1/', target_mount: 't2/', status: 'success' } });
    expect((await s.request('GET', 'sys/remount/status/00000000-0000-0000-0000-000000000000')).status).toBe(404);
  });

  it('"refuses protected paths in either direction, moves across classes, an existing destination and an unknown source, each naming the field"', async () => {
    await ok(s, 'POST', 'sys/mounts/t1', { type: 'test' });
    await ok(s, 'POST', 'sys/mounts/t2', { type: 'test' });
    await ok(s, 'POST', 'sys/auth/x', { type: 'testlogin' });
    const refusals: Array<[string, string, number, RegExp]> = [
      ['sys', 'system2', 400, /^invalid value for field "from": a built-in mount cannot be moved/],
      ['identity', 'ident2', 400, /^invalid value for field "from": a built-in mount cannot be moved/],
      ['auth/token', 'auth/token2', 400, /^invalid value for field "from": a built-in mount cannot be moved/],
      ['t1', 'sys/t1', 400, /^invalid value for field "to": a protected path/],
      ['t1', 'identity/t1', 400, /^invalid value for field "to": a protected path/],
      ['auth/x', 'auth/token', 400, /^invalid value for field "to": a protected path/],
      ['t1', 'auth/t1', 400, /^invalid value for field "to": a secrets engine cannot move under auth\//],
      ['auth/x', 'x2', 400, /^invalid value for field "to": an auth method moves to another auth\/ path/],
      ['t1', 't2', 409, /^invalid value for field "to": path is already in use at t2\//],
      ['t1', 't1/sub', 409, /^invalid value for field "to": path is already in use at t1\//],
      ['nothing', 't3', 400, /^invalid value for field "from": nothing is mounted there/],
      ['t1', '../t3', 400, /^invalid value for field "to": /],
    ];
    for (const [from, to, status, message] of refusals) {
      const r = await remount(from, to);
      expect(r.status, `${from} -> ${to}`).toBe(status);
      expect(r.body.errors[0], `${from} -> ${to}`).toMatch(message);
    }
    expect((await s.request('POST', 'sys/remount', { body: { from: 't1' } })).body.errors).toEqual(['missing required field "to"']);
    expect((await s.request('GET', 'sys/mounts/t1')).status).toBe(200);
  });

  it('"refuses while the source is being disabled, and a disable while it is being moved or disabled"', async () => {
    await ok(s, 'POST', 'sys/mounts/held', { type: 'test' });
    await s.request('GET', 'held/creds/one');
    let open!: () => void;
    probes.get('held/')!.revokeGate = new Promise<void>((resolve) => (open = resolve));
    const disabling = s.request('DELETE', 'sys/mounts/held');
    await expect.poll(() => probes.get('held/')!.revoking).toBe(1);

    const r = await remount('held', 'moved');
    expect(r.status).toBe(409);
    expect(r.body.errors).toEqual(['invalid value for field "from": the mount "held/" is being disabled or moved']);
    expect((await s.request('DELETE', 'sys/mounts/held')).status).toBe(409);
    open();
    expect((await disabling).status).toBe(204);
    expect((await s.request('GET', 'sys/mounts/moved')).status).toBe(404);
  });

  it('"is root-protected: update on sys/remount without sudo is 403"', async () => {
    await ok(s, 'POST', 'sys/mounts/t1', { type: 'test' });
    await ok(s, 'PUT', 'sys/policies/acl/mover', { policy: 'path "sys/remount" { capabilities = ["update"] }' });
    const token = (await s.request('POST', 'auth/token/create', { body: { policies: ['mover'] } })).body.auth.client_token;
    expect((await remount('t1', 't2', token)).status).toBe(403);
    await ok(s, 'PUT', 'sys/policies/acl/mover', { policy: 'path "sys/remount" { capabilities = ["update", "sudo"] }' });
    expect((await remount('t1', 't2', token)).status).toBe(200);
  });
});
