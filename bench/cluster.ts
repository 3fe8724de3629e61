/**
 * Storage and cluster sections: the core read, the cloud login and library check-out/check-in cycles on SQLite, on
 * PostgreSQL (a throwaway server of this run's own, fsync on), and on two nodes sharing one PostgreSQL database.
 *
 * Two nodes on this 2-core machine share the cores with each other, PostgreSQL and the load generator, so their added
 * throughput says little; what scaling out costs is judged per operation instead: each node's server CPU (all its
 * threads, from /proc) per operation it served, each node under the same 64 clients as one node alone, against the
 * figure of one node on a database of its own. A node of
 * a cluster keeps no token cache (docs/ha.md), and neither does one node on PostgreSQL, so the single-node PostgreSQL
 * figure is the baseline; what two nodes add is the coordination (the change version read every 200 ms, the lease
 * renewed every second, heartbeats) and contention on shared rows. Target: at most 1.2x.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { generateTls } from '../test/support/azure-emulator/ca.ts';
import { TLS_CERT_ENV, TLS_KEY_ENV } from '../test/support/azure-emulator/server.ts';
import { startNode, type NodeProcess } from '../test/support/node-process.ts';
import { createDatabase, startPostgres, stopPostgres, type PostgresFacts } from '../test/support/postgres.ts';
import { createIsolatedOu, startSlapd, stopSlapd, type SlapdFacts } from '../test/support/slapd.ts';
import { child, fmt, load, processCpu, ratio, stop } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;
const RESOURCE = 'https://management.azure.com/';
const TARGET = 1.2;

/** A running server: where it answers, which process to measure, and a reader's token where it made one. */
interface Served { url: string; pid: number; token?: string; close(): Promise<void> }

/** One measured configuration: operations per second in all, and server CPU per operation on each node (µs). */
interface Figure { perSecond: number; cpuUs: number[]; note?: string }

/** Runs `drive` (64 clients) against every node at once for `seconds` and charges each node's CPU to the operations it served. */
async function measure(nodes: Served[], seconds: number, drive: (node: Served) => Promise<number>): Promise<Figure> {
  const before = nodes.map((n) => processCpu(n.pid));
  const counts = await Promise.all(nodes.map((n) => drive(n)));
  const after = nodes.map((n) => processCpu(n.pid));
  return {
    perSecond: counts.reduce((a, b) => a + b, 0) / seconds,
    cpuUs: nodes.map((_, i) => (before[i] && after[i] ? ((after[i]!.all - before[i]!.all) / counts[i]) * 1e6 : NaN)),
  };
}

/** The configurations of a section, and the verdict on the two-node one. */
function report(section: string, unit: string, [sqlite, postgres, two, oneOfTwo]: Figure[]): string[] {
  const worst = Math.max(...two.cpuUs.map((c) => ratio(c, postgres.cpuUs[0])));
  const note = (f: Figure) => (f.note ? ` (${f.note})` : '');
  return [
    `${section}: SQLite, one node           ${fmt(sqlite.perSecond)} ${unit}/s, server CPU ${fmt(sqlite.cpuUs[0])} µs each${note(sqlite)}`,
    `${section}: PostgreSQL, one node       ${fmt(postgres.perSecond)} ${unit}/s, server CPU ${fmt(postgres.cpuUs[0])} µs each${note(postgres)}`,
    `${section}: PostgreSQL, two nodes      ${fmt(two.perSecond)} ${unit}/s in all${note(two)}, server CPU ${two.cpuUs.map((c) => `${fmt(c)} µs`).join(' and ')} each ` +
      `= ${two.cpuUs.map((c) => `${fmt(ratio(c, postgres.cpuUs[0]), 2)}x`).join(' and ')} the one-node PostgreSQL figure (target <= ${TARGET}x) ${worst <= TARGET ? 'OK' : 'ABOVE TARGET'}`,
    `${section}: PostgreSQL, two nodes, only one under load  ${fmt(oneOfTwo.perSecond)} ${unit}/s${note(oneOfTwo)}, server CPU ${fmt(oneOfTwo.cpuUs[0])} µs each = ${fmt(ratio(oneOfTwo.cpuUs[0], postgres.cpuUs[0]), 2)}x`,
  ];
}

async function servedChild(mode: string, dir: string, env: Record<string, string>): Promise<Served> {
  const c = await child(SERVERS, [mode, dir], env);
  return { url: String(c.info.url), pid: c.proc.pid!, token: c.info.token === undefined ? undefined : String(c.info.token), close: () => stop(c.proc) };
}

const served = (n: NodeProcess): Served => ({ url: n.url, pid: n.proc.pid!, close: () => n.stop() });

/**
 * SQLite in a directory of its own, one node on a PostgreSQL database and two nodes on another (measured with both
 * under load, and with the first alone), all started first and then measured in turn, twice (each configuration's
 * round with the lower CPU per operation is kept): on a 2-core
 * machine a single round is at the mercy of whatever else runs. Every node of a configuration under measurement gets
 * the same load as the single node does: scaling out is judged by what an operation costs a node, not by how a second
 * node shares cores that the first one already used.
 */
async function threeWays(postgres: PostgresFacts, start: (storage: Record<string, string>, dir: string, nodes: number) => Promise<Served[]>, run: (nodes: Served[]) => Promise<Figure>): Promise<Figure[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-cluster-'));
  const configs: Served[][] = [];
  try {
    for (const nodes of [1, 1, 2]) {
      const storage: Record<string, string> = configs.length === 0 ? {} : { BENCH_STORAGE: (await createDatabase(postgres)).url };
      const own = join(dir, String(configs.length));
      mkdirSync(own);
      const started = await start(storage, own, nodes);
      configs.push(nodes === 2 ? [...started, ...(await start({ ...storage, BENCH_JOIN: '1' }, own, nodes))] : started);
    }
    // The two nodes also with only the first under load: what being in a cluster costs a node, without a second
    // loaded node on the same cores.
    const runs = [...configs, configs[2].slice(0, 1)];
    const best: Figure[] = [];
    for (let round = 0; round < 2; round++) {
      for (const [i, nodes] of runs.entries()) {
        const figure = await run(nodes);
        const cost = (f: Figure) => Math.max(...f.cpuUs);
        if (!best[i] || cost(figure) < cost(best[i])) best[i] = figure;
      }
    }
    return best;
  } finally {
    for (const nodes of configs.reverse()) for (const s of nodes.reverse()) await s.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function coreRead(postgres: PostgresFacts, seconds: number): Promise<string[]> {
  const figures = await threeWays(postgres, async (env, dir) => [await servedChild('strongroom', dir, env)], (nodes) => measure(nodes, seconds, async (node) => {
    // A node that joined made no token; the first node's works on every node of its store.
    const round = await load(`${node.url}/v1/kv/data/app/config`, { seconds, headers: { 'x-service-token': nodes[0].token! } });
    return round.rps * seconds;
  }));
  return report('cluster: core read', 'reads', figures);
}

async function cloudLogin(postgres: PostgresFacts, seconds: number): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-cluster-cloud-'));
  const tls = await generateTls(join(dir, 'tls'));
  const ca = readFileSync(tls.caCertPath);
  const emu = await child(SERVERS, ['emulator', dir], { [TLS_CERT_ENV]: tls.certPath, [TLS_KEY_ENV]: tls.keyPath, NODE_EXTRA_CA_CERTS: tls.caCertPath });
  const info = emu.info as { url: string; envFile: string; environment: string; tenantId: string; clientId: string; clientSecret: string; principalId: string };
  try {
    const jwt = await new Promise<string>((resolve, reject) => {
      const req = request(`${info.url}/bench/mint?audience=${encodeURIComponent(RESOURCE)}`, { method: 'POST', ca }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => (res.statusCode === 200 ? resolve(JSON.parse(text).token) : reject(new Error(`mint: ${res.statusCode} ${text}`))));
      });
      req.on('error', reject);
      req.end();
    });
    const body = JSON.stringify({ role: 'bench', jwt });
    const figures = await threeWays(postgres, async (env, serverDir) => {
      const s = await servedChild('cloud', serverDir, { ...env, NODE_EXTRA_CA_CERTS: tls.caCertPath, CLOUD_ENVIRONMENT_FILEPATH: info.envFile });
      if (!env.BENCH_JOIN) {
        const api = (path: string, payload: unknown) => fetch(`${s.url}/v1/${path}`, { method: 'POST', headers: { 'x-service-token': 'root', 'content-type': 'application/json' }, body: JSON.stringify(payload) });
        await api('auth/cloud/config', { tenant_id: info.tenantId, resource: RESOURCE, environment: info.environment, client_id: info.clientId, client_secret: info.clientSecret });
        await api('auth/cloud/role/bench', { bound_service_principal_ids: info.principalId, token_policies: 'default' });
      }
      // The first login fetches the directory's keys; the measured ones use the cache.
      await fetch(`${s.url}/v1/auth/cloud/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      return [s];
    }, (nodes) => measure(nodes, seconds, async (node) => {
      const round = await load(`${node.url}/v1/auth/cloud/login`, { seconds, method: 'POST', body, headers: { 'content-type': 'application/json' } });
      return round.rps * seconds;
    }));
    return report('cluster: cloud login', 'logins', figures);
  } finally {
    await stop(emu.proc);
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Check-out and check-in cycles of 64 clients per node over HTTP against real server processes. The set has 16
 * accounts per node: each node's clients compete for as many accounts as one node's do alone (with the same set for
 * twice the clients, most check-outs would find nothing free, and the cost of those refusals would be charged to the
 * cycles).
 */
async function library(postgres: PostgresFacts, slapd: SlapdFacts, seconds: number): Promise<string[]> {
  const key = randomBytes(32).toString('base64');
  const figures = await threeWays(postgres, async (env, dir, nodes) => {
    const storage = env.BENCH_STORAGE ?? `sqlite:${join(dir, 'strongroom.db')}`;
    const node = await startNode(storage, key, { STRONGROOM_LOG_LEVEL: 'error' });
    if (!env.BENCH_JOIN) {
      const ou = await createIsolatedOu(slapd, { users: 0, serviceAccounts: 16 * nodes });
      await node.request('POST', 'ldap/config', { body: { url: slapd.url, binddn: ou.engine.dn, bindpass: ou.engine.password, userdn: ou.dn, request_timeout: 5 } });
      const set = await node.request('POST', 'ldap/library/bench', { body: { service_account_names: ou.serviceAccounts.map((a) => a.name), ttl: '1h', disable_check_in_enforcement: true } });
      if (set.status !== 204) throw new Error(`library set: ${set.status} ${JSON.stringify(set.body)}`);
    }
    return [served(node)];
  }, async (nodes) => {
    const refused = { count: 0 };
    const figure = await measure(nodes, seconds, (node) => libraryClients(node, seconds, refused));
    return { ...figure, note: `${fmt(refused.count / (figure.perSecond * seconds), 1)} check-outs per cycle found no account free` };
  });
  return report('cluster: library cycles', 'cycles', figures);
}

/** 64 clients checking accounts of the set out and in again until `seconds` pass: the cycles done. */
async function libraryClients(node: Served, seconds: number, refused: { count: number }): Promise<number> {
  const until = performance.now() + seconds * 1000;
  let cycles = 0;
  const call = (path: string, body?: unknown) => fetch(`${node.url}/v1/ldap/library/bench/${path}`, {
    method: 'POST', headers: { 'x-service-token': 'root', 'content-type': 'application/json' }, body: JSON.stringify(body ?? {}),
  });
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (performance.now() < until) {
      const out = await call('check-out');
      if (out.status !== 200) {
        refused.count++;
        await out.text();
        await new Promise((resolve) => setTimeout(resolve, 5));
        continue;
      }
      const account = ((await out.json()) as { data: { service_account_name: string } }).data.service_account_name;
      await (await call('check-in', { service_account_names: [account] })).text();
      cycles++;
    }
  }));
  return cycles;
}

export function clusterSections(seconds: number): { sections: Array<[string, () => Promise<string[]>]>; postgres: () => Promise<PostgresFacts>; cleanup: () => Promise<void> } {
  let postgres: PostgresFacts | undefined;
  let slapd: SlapdFacts | undefined;
  const pg = async () => (postgres ??= await startPostgres());
  return {
    /** This run's PostgreSQL server, started on first use (other sections share it). */
    postgres: pg,
    sections: [
      ['cluster: core read', async () => coreRead(await pg(), seconds)],
      ['cluster: cloud login', async () => cloudLogin(await pg(), seconds)],
      ['cluster: library', async () => library(await pg(), (slapd ??= await startSlapd()), seconds)],
    ],
    async cleanup() {
      if (postgres) await stopPostgres(postgres);
      if (slapd) await stopSlapd(slapd);
    },
  };
}
