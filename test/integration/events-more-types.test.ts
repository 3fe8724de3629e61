// The LDAP engine's and Strongroom's own event types beyond events-types.test.ts (docs/events.md, "Event types"):
// ldap/creds-create, ldap/library-check-out-wait-expired, ldap/dual-account-grace-end and audit/device-fail, each with
// its documented metadata, on SQLite and on a 2-node PostgreSQL cluster subscribed on the other node; no password in
// any of them. Real slapd, real audit files, a real WebSocket client.
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { auditDir, enableFile } from '../support/audit.ts';
import { eventTopologies, subscriber, until } from '../support/events.ts';
import { configure, cred, mountStorage, ok } from '../support/ldap-engine.ts';
import { createIsolatedOu } from '../support/slapd.ts';
import { readStaticRole } from '../../src/engines/ldap/static-role-store.ts';

const postgres = inject('postgres');
const facts = inject('slapd');

const { closers, sockets, topologies } = eventTopologies(postgres);

describe.each(topologies)('the remaining event types (%s)', (_name, nodes) => {
  it('"ldap/creds-create(-fail), ldap/library-check-out-wait-expired, ldap/dual-account-grace-end (reset and keep) and audit/device-fail fire with their documented metadata; no password in any event"', async () => {
    const ou = await createIsolatedOu(facts, { users: 5, serviceAccounts: 1 });
    closers.push(() => ou.cleanup());
    const logs = auditDir();
    closers.push(async () => logs.cleanup());
    const [one, two] = await nodes();
    const sub = await subscriber(two.url, sockets)('*', 'root');
    const ofType = (type: string) => sub.events.filter((e) => e.data.event_type === type);
    await configure(one, facts, ou);

    await ok(one, 'POST', 'ldap/role/dyn', { creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: person\ncn: {{.Username}}\nsn: x\n`, deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n` });
    const dyn = await ok(one, 'GET', 'ldap/creds/dyn');
    // A creation the directory refuses (its parent does not exist): rolled back, reported as it failed.
    await ok(one, 'POST', 'ldap/role/bad', { creation_ldif: `dn: cn={{.Username}},ou=missing,${ou.usersDn}\nobjectClass: person\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`, deletion_ldif: `dn: cn={{.Username}},ou=missing,${ou.usersDn}\nchangetype: delete\n` });
    const bad = await one.request('GET', 'ldap/creds/bad');
    expect(bad.status).toBeGreaterThanOrEqual(400);

    await ok(one, 'POST', 'ldap/library/team', { service_account_names: 'svc0', ttl: '1h', max_wait: '10s' });
    const lent = await ok(one, 'POST', 'ldap/library/team/check-out');
    const waited = await one.request('POST', 'ldap/library/team/check-out', { body: { wait: '1s' } });
    expect(waited.status).toBe(400);

    await ok(one, 'POST', 'ldap/static-role/blue', { username: 'user1', dual_account_mode: true, username_b: 'user2', rotation_period: '1h', grace_period: '2s', standby_action: 'reset' });
    const first = await cred(one, 'blue');
    await ok(one, 'POST', 'ldap/rotate-role/blue');
    const second = await cred(one, 'blue');
    // With standby_action keep the grace's end changes no password: the leader records it, and reports it.
    await ok(one, 'POST', 'ldap/static-role/green', { username: 'user3', dual_account_mode: true, username_b: 'user4', rotation_period: '1h', grace_period: '2s' });
    await ok(one, 'POST', 'ldap/rotate-role/green');
    const greenBefore = await readStaticRole(mountStorage(one), 'green');
    await until(() => ofType('ldap/dual-account-grace-end').length === 2, 'the end of both graces (a reset, a keep)', 30_000);
    const reset = await readStaticRole(mountStorage(one), 'blue');
    const green = await readStaticRole(mountStorage(one), 'green');
    const greenServed = await cred(one, 'green');

    // An audit device that fails every write from now on: its directory replaced by a file, then reopened.
    const dir = join(logs.dir, 'failing');
    mkdirSync(dir);
    await enableFile(one, 'broken', join(dir, 'audit.log'));
    renameSync(dir, `${dir}.old`);
    writeFileSync(dir, 'not a directory');
    await one.core.audit.reopen();
    expect((await one.request('GET', 'sys/mounts')).status).toBe(500);
    await until(() => ofType('audit/device-fail').length === 1, 'the device failure', 15_000);
    await until(() => ofType('ldap/creds-create').length === 2 && ofType('ldap/creds-create-fail').length === 1 && ofType('ldap/library-check-out-wait-expired').length === 1, 'the other events');

    expect(ofType('ldap/creds-create').map((e) => e.data.metadata)).toEqual([
      { modified: 'true', operation: 'read', path: 'creds/dyn', name: 'dyn' }, { modified: 'true', operation: 'read', path: 'creds/bad', name: 'bad' },
    ]);
    // A creation that fails is reported after its creds-create (written with the lease, before the account).
    const credsFailed = ofType('ldap/creds-create-fail')[0];
    expect(credsFailed.data.metadata).toEqual({ modified: 'false', operation: 'read', path: 'creds/bad', name: 'bad', error: bad.body.errors.join('; ') });
    expect(credsFailed.sequence).toBeGreaterThan(ofType('ldap/creds-create')[1].sequence);
    expect(ofType('ldap/creds-create')[0].data.plugin_info).toMatchObject({ mount_path: 'ldap/', plugin: 'ldap' });
    // The credential keeps its lease event too.
    expect(ofType('lease/issued').map((e) => e.data.metadata.lease_id)).toContain(dyn.lease_id);
    expect(ofType('ldap/library-check-out-wait-expired')[0].data.metadata).toEqual({ modified: 'false', operation: 'update', path: 'library/team/check-out', name: 'team', max_wait: '1' });
    const graceEnd = (name: string) => ofType('ldap/dual-account-grace-end').find((e) => e.data.metadata.name === name).data.metadata;
    expect(graceEnd('blue')).toMatchObject({ modified: 'true', operation: 'periodic', path: 'static-role/blue', name: 'blue', standby_action: 'reset', account: 'user1' });
    expect(Date.parse(graceEnd('blue').grace_period_end)).toBeGreaterThan(0);
    expect(graceEnd('green')).toEqual({ modified: 'true', operation: 'periodic', path: 'static-role/green', name: 'green', standby_action: 'keep', account: 'user3', grace_period_end: new Date(greenBefore!.grace_period_end).toISOString() });
    // Its end is recorded once: nothing is left for the leader to report again, and the served account is b's.
    expect(green).toMatchObject({ grace_period_end: 0, active_account: 'b' });
    expect(greenServed).toMatchObject({ username: 'user4' });
    // The reset is the grace's end, not a rotation: no rotation is reported after the one by hand.
    const endSeq = ofType('ldap/dual-account-grace-end').find((e) => e.data.metadata.name === 'blue').sequence;
    expect(ofType('ldap/rotate').filter((e) => e.sequence > endSeq && e.data.metadata.name === 'blue')).toEqual([]);
    const failed = ofType('audit/device-fail')[0].data;
    expect(failed.metadata).toEqual({ path: 'sys/audit/broken/', device_type: 'file', entry: 'request', error: 'ENOTDIR: not a directory', failed_writes: '1' });
    expect(failed.plugin_info).toBeUndefined();

    const canaries = [dyn.data.password, lent.data.password, first.password, second.password, reset!.password, reset!.password_b, green!.password, green!.password_b, ou.engine.password];
    for (const raw of sub.raw) for (const canary of canaries) expect(raw).not.toContain(canary);
  });
});
