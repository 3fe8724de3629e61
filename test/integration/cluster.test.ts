// A cluster of real server processes (src/main.ts, default cluster timings) on one PostgreSQL database, against slapd
// and the Azure emulator: what design.md's "Running more than one node" promises, under load, with its figures
// printed. The PostgreSQL server is this file's own, so the last test can stop and start it.
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { createHash, randomBytes } from 'node:crypto';
import pg from 'pg';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { ENV_NAME, startCloudWorld } from '../support/cloud-engine.ts';
import { spawnNode, startNode, type LogLine, type NodeProcess } from '../support/node-process.ts';
import { createDatabase, startPostgres, startServer, stopPostgres, stopServer, type PostgresFacts } from '../support/postgres.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';

const slapd = inject('slapd');
/** The coherence bound of docs/ha.md. */
const BOUND_MS = 1000;
/** The failover bound of docs/ha.md. */
const FAILOVER_MS = 15_000;

let postgres: PostgresFacts;
beforeAll(async () => {
  postgres = await startPostgres();
});
afterAll(async () => {
  await stopPostgres(postgres);
});

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

/** Three nodes started together on a new database (so they also race to initialise it). */
async function cluster(env: Record<string, string> = {}): Promise<{ nodes: NodeProcess[]; db: { url: string } }> {
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  const key = randomBytes(32).toString('base64');
  const nodes = await Promise.all(Array.from({ length: 3 }, () => startNode(db.url, key, env)));
  for (const n of nodes) closers.push(() => n.stop());
  return { nodes, db };
}

async function ok(node: NodeProcess, method: string, path: string, body?: unknown): Promise<any> {
  const r = await node.request(method, path, { body });
  expect(r.status, `${method} ${path}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
  return r.body;
}

/** Milliseconds until `check` holds, polled every 5 ms for at most `limit`. */
async function timeUntil(check: () => Promise<boolean>, limit = 10_000): Promise<number> {
  const started = performance.now();
  while (!(await check().catch(() => false))) {
    if (performance.now() - started > limit) throw new Error(`not within ${limit} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return performance.now() - started;
}

/** The slowest of the other nodes to see a change made through `nodes[0]`. */
async function slowest(nodes: NodeProcess[], seen: (n: NodeProcess) => Promise<boolean>): Promise<number> {
  return Math.max(...(await Promise.all(nodes.slice(1).map((n) => timeUntil(() => seen(n))))));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const leaseHash = (id: string) => createHash('sha256').update(id).digest('hex').slice(0, 32);

/** The ldap/ engine on an isolated OU, a library set of its service accounts and static roles on its users. */
async function ldapSetUp(node: NodeProcess, ou: IsolatedOu, { ttl, period }: { ttl: string; period: string }): Promise<void> {
  await ok(node, 'POST', 'ldap/config', { url: slapd.url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: 5 });
  await ok(node, 'POST', 'ldap/library/team', { service_account_names: ou.serviceAccounts.map((a) => a.name), ttl, max_ttl: '1h', disable_check_in_enforcement: true });
  for (const user of ou.users) await ok(node, 'POST', `ldap/static-role/${user.name}`, { username: user.name, rotation_period: period });
}

/** Every static role's password as any node serves it binds, and so does every library account's when checked out. */
async function everyPasswordBinds(nodes: NodeProcess[], ou: IsolatedOu): Promise<void> {
  for (const [i, user] of ou.users.entries()) {
    const { password } = (await ok(nodes[i % nodes.length], 'GET', `ldap/static-cred/${user.name}`)).data;
    expect(await canBind(slapd.url, user.dn, password), `static role ${user.name}`).toBe(true);
  }
  for (const [i, account] of ou.serviceAccounts.entries()) {
    const node = nodes[i % nodes.length];
    const out = await node.request('POST', 'ldap/library/team/check-out');
    expect(out.status, JSON.stringify(out.body)).toBe(200);
    const lent = out.body.data as { service_account_name: string; password: string };
    expect(await canBind(slapd.url, ou.serviceAccounts.find((a) => a.name === lent.service_account_name)!.dn, lent.password), `library account ${account.name}`).toBe(true);
    await ok(node, 'POST', 'ldap/library/team/check-in', { service_account_names: [lent.service_account_name] });
  }
}

interface Loan { account: string; lentAt: number; returningAt: number }

/**
 * Clients checking accounts out and in through the nodes that are up, until stopped. A loan counts from the answer
 * of its check-out to the sending of its check-in: two loans of one account overlapping there is a double lend.
 * `keep` is the share of loans left to expire (their leases end on the leader).
 */
function libraryLoad(nodes: () => NodeProcess[], clients: number, keep = 0) {
  const loans: Loan[] = [];
  let stopped = false;
  let refused = 0;
  const client = async (c: number) => {
    for (let i = 0; !stopped; i++) {
      const up = nodes();
      const node = up[(c + i) % up.length];
      const out = await node.request('POST', 'ldap/library/team/check-out').catch(() => undefined);
      if (out?.status !== 200) {
        refused++;
        await sleep(20);
        continue;
      }
      const lentAt = performance.now();
      const account = out.body.data.service_account_name as string;
      await sleep(5);
      if (Math.random() < keep) {
        loans.push({ account, lentAt, returningAt: Infinity });
        continue;
      }
      const returningAt = performance.now();
      loans.push({ account, lentAt, returningAt });
      const back = nodes()[(c + i + 1) % nodes().length];
      await back.request('POST', 'ldap/library/team/check-in', { body: { service_account_names: [account] } }).catch(() => undefined);
    }
  };
  const running = Promise.all(Array.from({ length: clients }, (_, c) => client(c)));
  return {
    loans,
    get refused() {
      return refused;
    },
    async stop() {
      stopped = true;
      await running;
    },
  };
}

/** Loans of one account that overlap (see libraryLoad). A kept loan ends when the next one of its account begins. */
function doubleLends(loans: Loan[]): Loan[][] {
  const out: Loan[][] = [];
  const byAccount = Map.groupBy(loans, (l) => l.account);
  for (const list of byAccount.values()) {
    const sorted = [...list].sort((a, b) => a.lentAt - b.lentAt);
    for (let i = 1; i < sorted.length; i++) if (sorted[i - 1].returningAt !== Infinity && sorted[i].lentAt < sorted[i - 1].returningAt) out.push([sorted[i - 1], sorted[i]]);
  }
  return out;
}

/** What the nodes logged with this message. */
const logged = (nodes: NodeProcess[], msg: string): LogLine[] => nodes.flatMap((n) => n.logs.filter((l) => l.msg === msg));

describe('tokens', () => {
  it('"a token revoked through any node is refused by every other node on its next request"', async () => {
    const { nodes } = await cluster();
    for (let i = 0; i < 15; i++) {
      const [maker, revoker] = [nodes[i % 3], nodes[(i + 1) % 3]];
      const token = (await ok(maker, 'POST', 'auth/token/create', { policies: ['default'] })).auth.client_token;
      for (const n of nodes) expect((await n.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
      await ok(revoker, 'POST', 'auth/token/revoke', { token });
      for (const n of nodes) expect((await n.request('GET', 'auth/token/lookup-self', { token })).status).toBe(403);
    }
  });
});

describe('what nodes keep in memory', () => {
  it('"a policy, mount, mount config or auth role change through one node is effective on every node within 1 s"', async () => {
    const world = await startCloudWorld();
    closers.push(() => world.emu.close());
    const { nodes } = await cluster({ CLOUD_ENVIRONMENT_FILEPATH: world.envFile });
    const [a] = nodes;
    const figures: Record<string, number> = {};

    await ok(a, 'PUT', 'sys/policies/acl/reader', { policy: 'path "sys/mounts" { capabilities = ["read"] }' });
    const token = (await ok(a, 'POST', 'auth/token/create', { policies: ['reader'] })).auth.client_token;
    await slowest(nodes, async (n) => (await n.request('GET', 'sys/mounts', { token })).status === 200);
    await ok(a, 'PUT', 'sys/policies/acl/reader', { policy: 'path "sys/mounts" { capabilities = ["deny"] }' });
    figures.policy = await slowest(nodes, async (n) => (await n.request('GET', 'sys/mounts', { token })).status === 403);

    await ok(a, 'POST', 'sys/mounts/second-ldap', { type: 'openldap' });
    figures.mount = await slowest(nodes, async (n) => (await n.request('GET', 'sys/mounts/second-ldap/tune')).status === 200);
    await ok(a, 'POST', 'sys/mounts/second-ldap/tune', { max_lease_ttl: '2h' });
    figures['mount config'] = await slowest(nodes, async (n) => (await n.request('GET', 'sys/mounts/second-ldap/tune')).body.data.max_lease_ttl === 7200);

    // A role the auth method caches parsed on every node that logged in with it.
    const app = seedApp(world.emu.state, { displayName: 'logs-in' });
    const resource = 'https://management.azure.com/';
    await ok(a, 'POST', 'auth/cloud/config', { tenant_id: world.emu.tenantId, resource, environment: ENV_NAME });
    await ok(a, 'POST', 'auth/cloud/role/app', { bound_service_principal_ids: app.servicePrincipalId, token_policies: 'default' });
    const jwt = await world.emu.miTokens.mint({ identity: { principalId: app.servicePrincipalId, clientId: app.appId }, audience: resource });
    const login = (n: NodeProcess) => n.request('POST', 'auth/cloud/login', { body: { role: 'app', jwt }, token: null });
    await slowest(nodes, async (n) => (await login(n)).status === 200);
    await ok(a, 'POST', 'auth/cloud/role/app', { bound_service_principal_ids: randomBytes(8).toString('hex') });
    figures['auth role'] = await slowest(nodes, async (n) => (await login(n)).status === 403);

    console.log(`changes made through one node, seen by the slowest other node after: ${Object.entries(figures).map(([k, v]) => `${k} ${v.toFixed(0)} ms`).join(', ')}`);
    for (const ms of Object.values(figures)) expect(ms).toBeLessThan(BOUND_MS);
  });
});

describe('the library across nodes', () => {
  it('"64 clients checking accounts out and in through three nodes: no account is ever lent twice, and every password binds"', { timeout: 60_000 }, async () => {
    const { nodes } = await cluster();
    const ou = await createIsolatedOu(slapd, { serviceAccounts: 8, users: 0 });
    closers.push(() => ou.cleanup());
    await ldapSetUp(nodes[0], ou, { ttl: '1h', period: '1h' });
    await Promise.all(nodes.map((n) => timeUntil(async () => (await n.request('GET', 'ldap/library/team/status')).status === 200)));
    const load = libraryLoad(() => nodes, 64);
    const started = performance.now();
    await sleep(6000);
    // At least 6 s of contention, and on a machine shared with other work as long as it takes to reach the loans the
    // assertion below asks for (a fixed 6 s gave 89 on a loaded 2-core machine).
    await timeUntil(async () => load.loans.length > 100, 30_000).catch(() => undefined);
    await load.stop();
    console.log(`library: ${load.loans.length} loans through 3 nodes by 64 clients in ${Math.round((performance.now() - started) / 1000)} s (${load.refused} check-outs found no account free)`);
    expect(load.loans.length).toBeGreaterThan(100);
    expect(doubleLends(load.loans)).toEqual([]);
    await everyPasswordBinds(nodes, ou);
  });
});

describe('static roles across nodes', () => {
  it('"each static role is rotated once per period across the cluster, and its password binds"', { timeout: 60_000 }, async () => {
    const { nodes } = await cluster();
    const ou = await createIsolatedOu(slapd, { serviceAccounts: 0, users: 4 });
    closers.push(() => ou.cleanup());
    // Created through different nodes: the leader's schedule reads them from the store.
    await ok(nodes[1], 'POST', 'ldap/config', { url: slapd.url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: 5 });
    for (const [i, user] of ou.users.entries()) {
      await timeUntil(async () => (await nodes[i % 3].request('GET', 'ldap/config')).status === 200);
      await ok(nodes[i % 3], 'POST', `ldap/static-role/${user.name}`, { username: user.name, rotation_period: '5s' });
    }
    const started = Date.now();
    await sleep(16_000);
    const rotations = logged(nodes, 'static role rotated').filter((l) => l.scheduled && l.time >= started);
    for (const user of ou.users) {
      const times = rotations.filter((r) => r.role === user.name).map((r) => r.time).sort((x, y) => x - y);
      const gaps = times.slice(1).map((t, i) => t - times[i]);
      console.log(`static role ${user.name}: rotated ${times.length} times in 16 s, ${gaps.map((g) => `${g} ms`).join(', ')} apart`);
      expect(times.length).toBeGreaterThanOrEqual(2);
      for (const gap of gaps) expect(gap).toBeGreaterThan(4500);
    }
    await everyPasswordBinds(nodes, ou);
  });
});

describe('failover', () => {
  it('"the leader killed mid-load: another node runs the jobs within 15 s; no lease revoked twice, no role rotated twice, no password lost"', { timeout: 90_000 }, async () => {
    const { nodes, db } = await cluster();
    const ou = await createIsolatedOu(slapd, { serviceAccounts: 8, users: 4 });
    closers.push(() => ou.cleanup());
    await ldapSetUp(nodes[0], ou, { ttl: '2s', period: '5s' });
    await Promise.all(nodes.map((n) => timeUntil(async () => (await n.request('GET', 'ldap/library/team/status')).status === 200)));
    const alive = new Set(nodes);
    const load = libraryLoad(() => [...alive], 32, 0.3);
    await sleep(4000);

    const leaderIndex = (await Promise.all(nodes.map(async (n) => (await n.request('GET', 'sys/leader', { token: null })).body.is_self))).indexOf(true);
    expect(leaderIndex).toBeGreaterThanOrEqual(0);
    const leader = nodes[leaderIndex];
    alive.delete(leader);
    const killedAt = Date.now();
    await leader.kill();
    // Revocations the dead node had claimed and not finished: the only ones another node may repeat.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    const claimed = new Set((await client.query<{ key: string }>("SELECT key FROM strongroom_kv WHERE key LIKE 'sys/expire/claim/%'")).rows.map((r) => r.key.split('/').pop()));
    await client.end();

    // Times from the logs (each node's clock is this machine's): the takeover, and the first lease expiry or
    // scheduled rotation after it.
    const survivors = [...alive];
    const firstAfter = (msgs: string[]) => Math.min(...msgs.flatMap((m) => logged(survivors, m)).filter((l) => l.time > killedAt && (l.msg !== 'static role rotated' || l.scheduled)).map((l) => l.time));
    await timeUntil(async () => Number.isFinite(firstAfter(['the engine revoked a lease', 'static role rotated'])), FAILOVER_MS + 5000);
    const tookOver = firstAfter(['this node leads the cluster: background work runs here']) - killedAt;
    const jobs = firstAfter(['the engine revoked a lease', 'static role rotated']) - killedAt;
    console.log(`failover: a node took over ${tookOver} ms after the leader was killed; the first job ran on it after ${jobs} ms`);
    expect(jobs).toBeLessThan(FAILOVER_MS);

    await sleep(12_000);
    await load.stop();
    // Every loan left to expire ends (the dead node's claims are taken over once it counts as dead).
    await timeUntil(async () => {
      const { waiters, ...accounts } = (await survivors[0].request('GET', 'ldap/library/team/status')).body.data;
      return waiters === 0 && Object.values(accounts).every((s) => (s as { available: boolean }).available);
    }, 20_000);

    expect(doubleLends(load.loans)).toEqual([]);
    const revocations = Map.groupBy(logged(nodes, 'the engine revoked a lease'), (l) => l.lease_id as string);
    const repeated = [...revocations].filter(([, lines]) => lines.length > 1).map(([id]) => id);
    console.log(`failover: ${revocations.size} leases revoked by the engine, ${repeated.length} of them again after the kill (${claimed.size} claims were left by the killed node)`);
    for (const id of repeated) expect(claimed.has(leaseHash(id)), `lease ${id} revoked twice`).toBe(true);
    for (const user of ou.users) {
      const times = logged(nodes, 'static role rotated').filter((r) => r.role === user.name).map((r) => r.time).sort((x, y) => x - y);
      for (let i = 1; i < times.length; i++) expect(times[i] - times[i - 1], `static role ${user.name}`).toBeGreaterThan(4500);
    }
    await everyPasswordBinds(survivors, ou);
  });
});

describe('PostgreSQL lost under load', () => {
  it('"PostgreSQL stopped and started under load: every node answers 503 meanwhile, then serves again with one leader, and nothing acknowledged is lost"', { timeout: 60_000 }, async () => {
    const { nodes } = await cluster();
    const acknowledged: string[] = [];
    const statuses = new Map<number, number>();
    let stopped = false;
    const writer = async (w: number) => {
      for (let i = 0; !stopped; i++) {
        const name = `p-${w}-${i}`;
        const r = await nodes[(w + i) % 3].request('PUT', `sys/policies/acl/${name}`, { body: { policy: 'path "x/*" { capabilities = ["read"] }' } }).catch(() => ({ status: 0 }));
        statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
        if (r.status === 204) acknowledged.push(name);
        else await sleep(50);
      }
    };
    const writers = Promise.all(Array.from({ length: 16 }, (_, w) => writer(w)));
    await sleep(2000);
    await stopServer(postgres, 'fast');
    await Promise.all(nodes.map((n) => timeUntil(async () => (await n.request('GET', 'sys/health', { token: null })).status === 503)));
    await sleep(2000);
    await startServer(postgres);
    const recovered = Math.max(...(await Promise.all(nodes.map((n) => timeUntil(async () => (await n.request('GET', 'sys/health', { token: null })).status === 200, 15_000)))));
    await sleep(2000);
    stopped = true;
    await writers;
    console.log(`PostgreSQL restart: every node healthy ${recovered.toFixed(0)} ms after it was back; answers by status ${JSON.stringify(Object.fromEntries(statuses))}`);
    expect(statuses.get(503)).toBeGreaterThan(0);

    await timeUntil(async () => (await Promise.all(nodes.map(async (n) => (await n.request('GET', 'sys/leader', { token: null })).body.is_self))).filter(Boolean).length === 1, 15_000);
    const listed = new Set((await ok(nodes[1], 'LIST', 'sys/policies/acl')).data.keys as string[]);
    expect(acknowledged.filter((name) => !listed.has(name))).toEqual([]);
    // Caches follow changes again: one made now reaches every node within the bound.
    await ok(nodes[0], 'PUT', 'sys/policies/acl/after', { policy: 'path "sys/mounts" { capabilities = ["deny"] }' });
    const token = (await ok(nodes[0], 'POST', 'auth/token/create', { policies: ['after'] })).auth.client_token;
    await ok(nodes[0], 'PUT', 'sys/policies/acl/after', { policy: 'path "sys/mounts" { capabilities = ["read"] }' });
    expect(await slowest(nodes, async (n) => (await n.request('GET', 'sys/mounts', { token })).status === 200)).toBeLessThan(BOUND_MS);
  });
});

describe('stopping', () => {
  it('"a stop signal during start-up ends the node at once with exit 0 (as PID 1 in a container Node has no default handler)"', { timeout: 30_000 }, async () => {
    const db = await createDatabase(postgres);
    closers.push(() => db.drop());
    const key = randomBytes(32).toString('base64');
    const first = await startNode(db.url, key);
    await first.stop();
    // As if the node that initialised the store were still at it: the next node waits up to 30 s for its mark.
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    expect((await client.query("DELETE FROM strongroom_kv WHERE key LIKE '%core/initialized'")).rowCount).toBe(1);
    await client.end();
    const { node } = await spawnNode(db.url, key);
    closers.push(() => node.kill());
    await timeUntil(async () => node.logs.some((l) => l.msg === 'waiting for the node that initialises the store to finish'));
    const signalled = performance.now();
    node.proc.kill('SIGTERM');
    await node.stop();
    expect(performance.now() - signalled).toBeLessThan(5000);
    expect({ code: node.proc.exitCode, signal: node.proc.signalCode }).toEqual({ code: 0, signal: null });
  });
});
