// Every event type the LDAP engine and the lease manager produce (docs/events.md), with its documented metadata: on
// SQLite (one node), and on a 2-node PostgreSQL cluster where the subscriber is on the other node, reading the store.
import { describe, expect, inject, it } from 'vitest';
import { createIsolatedOu, deleteSubtree } from '../support/slapd.ts';
import { configure, ok } from '../support/ldap-engine.ts';
import { eventTopologies, subscriber, until } from '../support/events.ts';

const postgres = inject('postgres');
const facts = inject('slapd');

const { closers, sockets, topologies } = eventTopologies(postgres);

describe.each(topologies)('every event type (%s)', (_name, nodes) => {
  it('"each event type fires with its documented metadata, and the subscriber receives it"', async () => {
    const ou = await createIsolatedOu(facts, { users: 3, serviceAccounts: 2 });
    closers.push(() => ou.cleanup());
    const [one, two] = await nodes();
    const sub = await subscriber(two.url, sockets)('*', 'root');
    await configure(one, facts, ou);
    await ok(one, 'POST', 'ldap/static-role/app', { username: 'user0', rotation_period: '1h' });
    await ok(one, 'POST', 'ldap/static-role/app', { rotation_period: '2h' });
    await ok(one, 'POST', 'ldap/rotate-role/app');
    await ok(one, 'POST', 'ldap/static-role/gone', { username: 'user1', rotation_period: '1h' });
    await deleteSubtree(facts, ou.users[1]!.dn);
    expect((await one.request('POST', 'ldap/rotate-role/gone')).status).toBeGreaterThanOrEqual(400);
    await ok(one, 'DELETE', 'ldap/static-role/app');
    await ok(one, 'POST', 'ldap/role/dyn', { creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: person\ncn: {{.Username}}\nsn: x\n`, deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n` });
    await ok(one, 'POST', 'ldap/role/dyn', { default_ttl: 60 });
    await ok(one, 'DELETE', 'ldap/role/dyn');
    await ok(one, 'POST', 'ldap/library/team', { service_account_names: 'svc0', ttl: '1h' });
    const lent = await ok(one, 'POST', 'ldap/library/team/check-out');
    await ok(one, 'PUT', 'sys/leases/renew', { lease_id: lent.lease_id });
    await ok(one, 'POST', 'ldap/library/team/check-in', { service_account_names: 'svc0' });
    const short = await ok(one, 'POST', 'ldap/library/team/check-out', { ttl: '2s' });
    const second = await ok(one, 'POST', 'ldap/library/team/check-in', {}).catch(() => undefined);
    expect(second).toBeDefined();
    const third = await ok(one, 'POST', 'ldap/library/team/check-out', { ttl: '2s' });
    await ok(one, 'POST', 'ldap/rotate-root');

    const expected = [
      'ldap/static-role-create', 'ldap/static-role-update', 'ldap/rotate', 'ldap/static-role-create', 'ldap/rotate-fail', 'ldap/static-role-delete',
      'ldap/role-create', 'ldap/role-update', 'ldap/role-delete',
      'lease/issued', 'ldap/library-check-out', 'lease/renewed', 'lease/revoked', 'ldap/library-check-in',
      'lease/issued', 'ldap/library-check-out', 'lease/revoked', 'ldap/library-check-in',
      'lease/issued', 'ldap/library-check-out', 'ldap/rotate-root', 'lease/expired', 'ldap/library-check-in',
    ];
    const seen = () => sub.events.map((e) => e.data.event_type);
    await until(() => seen().length >= expected.length, `every event (got ${JSON.stringify(seen())})`, 30_000);
    // Within one transaction the order of appends is the producers'; across transactions it is commit order.
    expect([...seen()].sort()).toEqual([...expected].sort());
    const find = (type: string, n = 0) => sub.events.filter((e) => e.data.event_type === type)[n];
    expect(find('ldap/rotate').data.metadata).toEqual({ modified: 'true', operation: 'update', path: 'rotate-role/app', name: 'app', last_service_rotation: expect.stringMatching(/^\d{4}-\d\d-\d\dT[\d:.]+Z$/) });
    expect(find('ldap/rotate-fail').data.metadata).toMatchObject({ modified: 'false', operation: 'update', path: 'rotate-role/gone', name: 'gone', attempts: '1' });
    expect(find('ldap/rotate-fail').data.metadata.error).not.toBe('');
    expect(find('ldap/rotate-root').data.metadata).toEqual({ modified: 'true', operation: 'update', path: 'rotate-root' });
    expect(find('ldap/library-check-out').data.metadata).toEqual({ modified: 'true', operation: 'update', path: 'library/team/check-out', name: 'team', service_account: 'svc0' });
    expect(find('ldap/library-check-in').data.metadata).toEqual({ modified: 'true', operation: 'update', path: 'library/team/check-in', name: 'team', service_account: 'svc0' });
    expect(find('ldap/role-create').data.metadata).toEqual({ modified: 'true', operation: 'create', path: 'role/dyn', name: 'dyn' });
    expect(find('lease/issued').data.metadata).toMatchObject({ lease_id: lent.lease_id, path: lent.lease_id, mount_path: 'ldap/' });
    expect(find('lease/issued').data.plugin_info).toBeUndefined();
    expect(find('lease/expired').data.metadata.lease_id).toBe(third.lease_id);
    expect(find('lease/revoked', 1).data.metadata.lease_id).toBe(short.lease_id);
    const seqs = sub.events.map((e) => e.sequence);
    expect(seqs).toEqual(Array.from({ length: seqs.length }, (_, i) => seqs[0] + i));
    // No password the server handled is in any event.
    for (const raw of sub.raw) for (const secret of [lent.data.password, short.data.password, third.data.password, ou.engine.password]) expect(raw).not.toContain(secret);
  });
});
