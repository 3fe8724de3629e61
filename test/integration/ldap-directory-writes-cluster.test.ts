// Reproduction B of audit 2026-11-28 N2 (docs/ldap.md "Directory writes"): two real server processes on PostgreSQL,
// the leader paused with SIGSTOP while its scheduled rotation's modify is held in the network (the stall proxy), the
// other node taking over, finishing and rotating again; then the held modify is delivered and the old leader resumed.
import { randomBytes } from 'node:crypto';
import { afterEach, describe, expect, inject, it, vi } from 'vitest';
import { startNode, type NodeProcess } from '../support/node-process.ts';
import { createDatabase } from '../support/postgres.ts';
import { parseScrape } from '../support/prometheus.ts';
import { canBind, createIsolatedOu } from '../support/slapd.ts';
import { LDAP_OP, startStallProxy } from '../support/stall-proxy.ts';

const slapd = inject('slapd');
const postgres = inject('postgres');

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!().catch(() => undefined);
});

async function ok(node: NodeProcess, method: string, path: string, body?: unknown): Promise<any> {
  const r = await node.request(method, path, { body });
  expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
  return r.body;
}

/** Verifications the node counted with these labels, summed over the others. */
async function verifications(node: NodeProcess, labels: Record<string, string>): Promise<number> {
  const res = await fetch(`${node.url}/v1/sys/metrics?format=prometheus`, { headers: { 'x-vault-token': 'root' } });
  return parseScrape(await res.text()).samples
    .filter((m) => m.name === 'strongroom_ldap_directory_verifications_total' && Object.entries(labels).every(([k, v]) => m.labels[k] === v))
    .reduce((sum, m) => sum + m.value, 0);
}

const leads = async (node: NodeProcess): Promise<boolean> => (await node.request('GET', 'sys/leader', { token: null }).catch(() => undefined))?.body?.is_self === true;

/**
 * Two nodes, the ldap/ engine behind the stall proxy (with or without the Assertion Control), a static role rotating
 * every 10 s. Returns once the leader's scheduled rotation (its WAL written) sent the request `op` and the proxy holds
 * it, the leader paused: its modify, or the read of the entry's state right before the modify.
 */
async function pausedLeaderWithHeldRequest(hideAssertion: boolean, { op = LDAP_OP.modify as number, requestTimeout = 3 } = {}) {
  const ou = await createIsolatedOu(slapd, { users: 1, serviceAccounts: 0 });
  closers.push(() => ou.cleanup());
  const proxy = await startStallProxy(slapd.host, slapd.port);
  closers.push(() => proxy.close());
  proxy.hideAssertionControl = hideAssertion;
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  const key = randomBytes(32).toString('base64');
  const nodes = await Promise.all([startNode(db.url, key), startNode(db.url, key)]);
  for (const n of nodes) closers.push(() => n.stop());
  await vi.waitFor(async () => expect((await Promise.all(nodes.map(leads))).filter(Boolean)).toHaveLength(1), { timeout: 15_000 });
  const leader = (await leads(nodes[0]!)) ? nodes[0]! : nodes[1]!;
  const other = nodes.find((n) => n !== leader)!;
  // A resumed SIGSTOP-ed process must not outlive the test.
  closers.push(async () => leader.proc.kill('SIGCONT'));
  const user = ou.users[0]!;
  await ok(leader, 'POST', 'ldap/config', { url: proxy.url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: requestTimeout });
  await ok(leader, 'POST', 'ldap/static-role/bob', { username: user.name, rotation_period: '10s' });
  const first = (await ok(other, 'GET', 'ldap/static-cred/bob')).data.password as string;
  proxy.arm('hold', op);
  await vi.waitFor(() => expect(proxy.holding()).toBe(true), { timeout: 20_000, interval: 20 });
  leader.proc.kill('SIGSTOP');
  return { leader, other, proxy, user, ou, first };
}

describe('a paused leader\'s late directory write (reproduction B, two nodes on PostgreSQL)', () => {
  // The request timeout decides what the resumed node meets first: its timer (3 s long past: the answer is lost, the
  // outcome unknown) or the answer already in its socket (30 s: the write succeeded, and its fenced record fails).
  it.each([
    { assertion: true, requestTimeout: 3, outcome: 'unknown', expected: 'slapd refuses the late write; its answer lost' },
    { assertion: true, requestTimeout: 30, outcome: 'refused', expected: 'slapd refuses the late write and says so (122)' },
    { assertion: false, requestTimeout: 3, outcome: 'unknown', expected: 'the late write lands; its answer lost, the resumed node verifies and repairs' },
    { assertion: false, requestTimeout: 30, outcome: 'fenced', expected: 'the late write lands; its record fenced, the resumed node verifies and repairs' },
  ])('"with the Assertion Control: $assertion, request_timeout $requestTimeout s — $expected; afterwards every served password binds and the bind account binds"', async ({ assertion, requestTimeout, outcome }) => {
    const { leader, other, proxy, user, ou, first } = await pausedLeaderWithHeldRequest(!assertion, { requestTimeout });
    // The other node takes over and finishes the paused leader's rotation with its WAL password, then rotates by hand.
    await vi.waitFor(async () => expect(await leads(other)).toBe(true), { timeout: 20_000, interval: 100 });
    await vi.waitFor(async () => expect((await ok(other, 'GET', 'ldap/static-cred/bob')).data.password).not.toBe(first), { timeout: 20_000, interval: 100 });
    await ok(other, 'POST', 'ldap/static-role/bob', { rotation_period: '1h' });
    await ok(other, 'POST', 'ldap/rotate-role/bob');
    const served = (await ok(other, 'GET', 'ldap/static-cred/bob')).data.password as string;
    expect(await canBind(slapd.url, user.dn, served)).toBe(true);

    await proxy.release();
    expect(await canBind(slapd.url, user.dn, served)).toBe(assertion);
    const resumed = performance.now();
    leader.proc.kill('SIGCONT');

    // With a 3 s timeout the resumed node finds both its expired timer and slapd's answer ready; which it handles first
    // is up to the event loop under load (the answer may win), and both outcomes are handled alike: what must hold is
    // the result (verified or repaired) and every served password binding afterwards.
    const seen = async (result: string) => {
      const outcomes = requestTimeout === 3 ? ['unknown', assertion ? 'refused' : 'fenced'] : [outcome];
      let n = 0;
      for (const o of outcomes) n += await verifications(leader, { target: 'static_role', outcome: o, result });
      return n;
    };
    if (!assertion) {
      await vi.waitFor(async () => expect(await seen('repaired')).toBe(1), { timeout: 20_000, interval: 100 });
      const repairMs = Math.round(performance.now() - resumed);
      const lines = leader.logs.filter((l) => String(l.msg).startsWith('LDAP REPAIR'));
      expect(lines.map((l) => l.level)).toEqual([50, 50]);
      expect(JSON.stringify(lines)).not.toContain(served);
      console.log(`reproduction B without the Assertion Control: repaired by the resumed node ${repairMs} ms after SIGCONT (outcome ${outcome})`);
    } else {
      // Its write refused (or its answer lost to its own timeout), the resumed node's bind finds the served password.
      await vi.waitFor(async () => expect(await seen('verified')).toBe(1), { timeout: 20_000, interval: 100 });
      expect(await verifications(leader, { target: 'static_role', result: 'repaired' })).toBe(0);
      expect(await leads(leader)).toBe(false);
    }
    // Every served password binds, through either node, and the engine (its bind account) still works on both.
    for (const node of [leader, other]) {
      const now = (await ok(node, 'GET', 'ldap/static-cred/bob')).data.password as string;
      expect(await canBind(slapd.url, user.dn, now)).toBe(true);
    }
    expect(await canBind(slapd.url, ou.engine.dn, ou.engine.password)).toBe(true);
    await ok(other, 'POST', 'ldap/rotate-role/bob');
    expect(await canBind(slapd.url, user.dn, (await ok(leader, 'GET', 'ldap/static-cred/bob')).data.password)).toBe(true);
  }, 120_000);
});

describe('leadership lost between the WAL and the directory write', () => {
  it('"a leader paused after its WAL and before its modify sends nothing once resumed: its fence is checked right before the write"', async () => {
    const { leader, other, proxy, user, first } = await pausedLeaderWithHeldRequest(false, { op: LDAP_OP.search });
    await vi.waitFor(async () => expect(await leads(other)).toBe(true), { timeout: 20_000, interval: 100 });
    await vi.waitFor(async () => expect((await ok(other, 'GET', 'ldap/static-cred/bob')).data.password).not.toBe(first), { timeout: 20_000, interval: 100 });
    await ok(other, 'POST', 'ldap/static-role/bob', { rotation_period: '1h' });
    await ok(other, 'POST', 'ldap/rotate-role/bob');
    const served = (await ok(other, 'GET', 'ldap/static-cred/bob')).data.password as string;
    const modifies = proxy.modifies();
    await proxy.release();
    leader.proc.kill('SIGCONT');
    await vi.waitFor(() => expect(leader.logs.some((l) => l.msg === 'static role rotation stopped: this node no longer leads' &&
      JSON.stringify(l).includes('stopped before its directory write'))).toBe(true), { timeout: 20_000, interval: 100 });
    expect(proxy.modifies()).toBe(modifies);
    expect(await canBind(slapd.url, user.dn, served)).toBe(true);
    expect((await ok(leader, 'GET', 'ldap/static-cred/bob')).data.password).toBe(served);
  }, 120_000);
});
