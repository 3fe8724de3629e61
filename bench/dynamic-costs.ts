/**
 * Where a dynamic credential's CPU goes beside the floor's work, measured in this process on the bench's own role
 * (bench/dynamic-http.ts prints it under its figures): the pieces a cycle of `creds` + `sys/leases/revoke` runs once
 * each, timed alone in a loop, so they hold still where a profile of the loaded server (bench/cpu-profile.ts) does not.
 * Each line names the guarantee the piece keeps.
 */
import { randomBytes } from 'node:crypto';
import { seal, open } from '../src/core/barrier.ts';
import { buildEvent } from '../src/core/events/envelope.ts';
import { leaseEntrySchema, type LeaseEntry } from '../src/core/leases.ts';
import { checkRecordDns, parseDynamicRole, sampleLdifData } from '../src/engines/ldap/dynamic-roles.ts';
import { DEFAULT_USERNAME_TEMPLATE, DynamicTemplates, renderLdifTemplate } from '../src/engines/ldap/dynamic-templates.ts';
import { fmt } from './util.ts';

/** µs per call of `fn`, the median of five timed loops after a warm-up. */
function perCall(fn: () => unknown, loops = 2000): number {
  for (let i = 0; i < loops; i++) fn();
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const started = process.cpuUsage();
    for (let i = 0; i < loops; i++) fn();
    const used = process.cpuUsage(started);
    runs.push((used.user + used.system) / loops);
  }
  return runs.sort((a, b) => a - b)[2]!;
}

export function dynamicCosts(role: Record<string, unknown>, binddn: string): string[] {
  const templates = new DynamicTemplates(() => Date.now());
  const prepared = parseDynamicRole(Buffer.from(JSON.stringify({ creation_ldif: role.creation_ldif, deletion_ldif: role.deletion_ldif, rollback_ldif: role.rollback_ldif ?? '' })));
  const data = sampleLdifData('bench', Date.now());
  const username = templates.username(prepared.username_template || DEFAULT_USERNAME_TEMPLATE);
  const ldifs = (['creation_ldif', 'deletion_ldif', 'rollback_ldif'] as const).filter((f) => prepared[f] !== '').map((f) => [f, templates.ldif(f, prepared[f])] as const);
  const render = () => {
    templates.renderUsername(username, { DisplayName: 'root', RoleName: 'bench' });
    return ldifs.map(([field, t]) => [field, renderLdifTemplate(field, t, data)] as const);
  };
  const rendered = render();
  const bind = { username: '', dn: binddn };
  // Each request renders a new account's DN, which the DN normaliser's memo (1,024 DNs) has not seen: so do these.
  const variants = Array.from({ length: 4096 }, (_, i) => ldifs.map(([field, t]) => [field, renderLdifTemplate(field, t, { ...data, Username: `bench_${i}` })] as const));
  let next = 0;
  const checks = () => {
    const passed = new Set<string>();
    for (const [field, r] of variants[next++ % variants.length]!) checkRecordDns(field, r.records, bind, passed);
  };
  const now = Date.now();
  const id = `ldap/creds/bench/${randomBytes(18).toString('base64url')}`;
  const lease: LeaseEntry = leaseEntrySchema.parse({
    id, kind: 'secret', mountPath: 'ldap/', secretType: 'dynamic_creds', issueTime: now, expireTime: now + 3600_000, ttl: 3600, renewable: true, tokenSalted: randomBytes(32).toString('hex'),
    internal: { role_name: 'bench', username: data.Username, distinguished_names: rendered[0]![1].records.map((r) => r.dn), deletion_ldif: rendered.find(([f]) => f === 'deletion_ldif')![1].text },
  });
  const leaseJson = Buffer.from(JSON.stringify(lease));
  const event = Buffer.from(JSON.stringify(buildEvent('lease/issued', { lease_id: id, path: id, mount_path: 'ldap/', expire_time: new Date(lease.expireTime).toISOString() }, { mount_class: 'secret', mount_accessor: 'ldap_0123abcd', mount_path: 'ldap/', plugin: 'ldap' }, now)));
  const key = randomBytes(32);
  const sealed = seal(key, 1, 'sys/expire/id/x', leaseJson);
  // A cycle seals the lease record, its time and token index entries and two events, and opens the lease once.
  const encryption = () => {
    seal(key, 1, 'sys/expire/id/x', leaseJson);
    seal(key, 1, 'sys/expire/time/x', Buffer.from(id));
    seal(key, 1, 'sys/expire/token/x', Buffer.from(id));
    seal(key, 1, 'events', event);
    seal(key, 1, 'events', event);
    open(() => key, 'sys/expire/id/x', sealed);
  };
  const figures: Array<[string, number]> = [
    ['templates: the username and every LDIF rendered, the LDIF parsed', perCall(render)],
    ['bind-account refusal and DN validity, every rendered record', perCall(checks)],
    [`encryption at rest: 5 seals (lease ${leaseJson.length} B, 2 index entries, 2 events of ${event.length} B) and 1 open`, perCall(encryption)],
    ['the lease parsed when read back (JSON and schema; skipped for a lease this node registered lately)', perCall(() => leaseEntrySchema.parse(JSON.parse(leaseJson.toString('utf8'))))],
  ];
  return figures.map(([what, us]) => `dynamic over HTTP: where it goes, in-process: ${what}: ${fmt(us, 1)} µs per cycle`);
}
