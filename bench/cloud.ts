/**
 * Cloud sections: the secrets engine and the auth method against the Azure emulator, each in its own
 * process (emulator, server, load generator). The emulator's HTTPS is trusted through NODE_EXTRA_CA_CERTS,
 * which Node reads only at start, so the CA is made here and handed to the children; this process talks
 * to the emulator with the CA passed explicitly. BENCH_CPU_PROF=<dir> profiles the server child (--cpu-prof).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateTls } from '../test/support/azure-emulator/ca.ts';
import { TLS_CERT_ENV, TLS_KEY_ENV } from '../test/support/azure-emulator/server.ts';
import { benchAuditDevice, child, fmt, load, processCpu, ratio, stop, type Throughput } from './util.ts';

const SERVERS = new URL('./servers.ts', import.meta.url).pathname;
/** Audience of the managed-identity tokens workloads present (what Azure VMs usually request). */
const RESOURCE = 'https://management.azure.com/';
/** Vault's published AppRole login throughput. */
const VAULT_LOGINS_PER_SECOND = 5_200;

interface EmulatorInfo {
  url: string;
  envFile: string;
  environment: string;
  tenantId: string;
  subscriptionId: string;
  clientId: string;
  clientSecret: string;
  group: string;
  principalId: string;
}

interface World {
  emu: EmulatorInfo;
  serverUrl: string;
  serverPid: number;
  /** Calls the emulator's /bench control routes (this process does not trust its CA globally). */
  control(method: 'GET' | 'POST', path: string): Promise<any>;
  /** Calls the server as root. */
  api(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }>;
  caFile: string;
  /** A directory of the run's (for an audit log). */
  dir: string;
  close(): Promise<void>;
}

async function startWorld(): Promise<World> {
  const dir = mkdtempSync(join(tmpdir(), 'strongroom-bench-cloud-'));
  const tls = await generateTls(join(dir, 'tls'));
  const ca = readFileSync(tls.caCertPath);
  const emuChild = await child(SERVERS, ['emulator', dir], { [TLS_CERT_ENV]: tls.certPath, [TLS_KEY_ENV]: tls.keyPath, NODE_EXTRA_CA_CERTS: tls.caCertPath });
  const emu = emuChild.info as unknown as EmulatorInfo;
  const profileDir = process.env.BENCH_CPU_PROF;
  const srChild = await child(SERVERS, ['cloud', dir], { NODE_EXTRA_CA_CERTS: tls.caCertPath, CLOUD_ENVIRONMENT_FILEPATH: emu.envFile }, profileDir ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []);
  const serverUrl = String(srChild.info.url);
  const control = (method: 'GET' | 'POST', path: string) => new Promise<any>((resolve, reject) => {
    const req = request(`${emu.url}${path}`, { method, ca }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => (res.statusCode! >= 300 ? reject(new Error(`emulator ${path}: ${res.statusCode} ${text}`)) : resolve(text ? JSON.parse(text) : undefined)));
    });
    req.on('error', reject);
    req.end();
  });
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${serverUrl}/v1/${path}`, {
      method, headers: { 'x-service-token': 'root', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : undefined };
  };
  return {
    emu, serverUrl, serverPid: srChild.proc.pid!, control, api, caFile: tls.caCertPath, dir,
    async close() {
      await stop(srChild.proc, profileDir ? 'SIGINT' : 'SIGTERM');
      await stop(emuChild.proc);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function must(res: Promise<{ status: number; body: any }>, what: string): Promise<any> {
  const r = await res;
  if (r.status >= 300) throw new Error(`${what}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
  return r.body;
}

/** Issue + revoke cycles by `concurrency` workers until `seconds` pass or `limit` credentials were made. */
async function credsCycles(world: World, concurrency: number, opts: { seconds?: number; limit?: number }): Promise<{ perSecond: number; count: number; graph: number; arm: number; seconds: number }> {
  const before = await world.control('GET', '/bench/log');
  const started = performance.now();
  const until = started + (opts.seconds ?? Infinity) * 1000;
  let count = 0;
  let claimed = 0;
  const worker = async () => {
    while (performance.now() < until && claimed < (opts.limit ?? Infinity)) {
      claimed++;
      const creds = await must(world.api('GET', 'cloud/creds/bench'), 'creds');
      await must(world.api('PUT', 'sys/leases/revoke', { lease_id: creds.lease_id }), 'revoke');
      count++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const elapsed = (performance.now() - started) / 1000;
  const log = await world.control('GET', `/bench/log?since=${before.next}`);
  return { perSecond: count / elapsed, count, graph: log.graph / count, arm: log.arm / count, seconds: elapsed };
}

/** Dynamic service principals (application, SP, password, role assignment, group membership) issued and revoked. */
export async function benchCloudSecrets(seconds: number): Promise<string[]> {
  const world = await startWorld();
  try {
    const { emu } = world;
    await must(world.api('POST', 'cloud/config', {
      subscription_id: emu.subscriptionId, tenant_id: emu.tenantId, client_id: emu.clientId, client_secret: emu.clientSecret, environment: emu.environment,
    }), 'cloud/config');
    await must(world.api('POST', 'cloud/roles/bench', {
      cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: `/subscriptions/${emu.subscriptionId}` }]),
      cloud_groups: JSON.stringify([{ group_name: emu.group }]),
      ttl: '1h',
    }), 'cloud/roles/bench');
    await credsCycles(world, 1, { limit: 2 }); // warm-up: credential token, SDK clients, role resolution
    const fast = await credsCycles(world, 4, { seconds });
    // Replication delay: ARM and group membership refuse the new principal for a while; the engine retries.
    const delayMs = 1000;
    await world.control('POST', `/bench/replication-delay?ms=${delayMs}`);
    const slow = await credsCycles(world, 4, { limit: 8 });
    await world.control('POST', '/bench/replication-delay?ms=0');
    const line = (label: string, r: typeof fast) =>
      `cloud secrets: ${label} ${fmt(r.perSecond, 1)} creds issue+revoke/s (${r.count} in ${fmt(r.seconds, 1)} s, 4 workers); per credential ${fmt(r.graph, 1)} Graph + ${fmt(r.arm, 1)} ARM calls`;
    return [
      line('no replication delay ', fast),
      line(`${delayMs} ms replication delay`, slow),
    ];
  } finally {
    await world.close();
  }
}

/**
 * Logins with a cached JWKS for an SP-bound role (bound_service_principal_ids = the managed identity's
 * oid, so no ARM call per login), against a bare jose jwtVerify loop on the same token and keys.
 */
export async function benchCloudAuth(seconds: number): Promise<string[]> {
  const world = await startWorld();
  try {
    const { emu } = world;
    await must(world.api('POST', 'auth/cloud/config', {
      tenant_id: emu.tenantId, resource: RESOURCE, environment: emu.environment, client_id: emu.clientId, client_secret: emu.clientSecret,
    }), 'auth/cloud/config');
    await must(world.api('POST', 'auth/cloud/role/bench', { bound_service_principal_ids: emu.principalId, token_policies: 'default' }), 'auth/cloud/role/bench');
    const { token: jwt } = await world.control('POST', `/bench/mint?audience=${encodeURIComponent(RESOURCE)}`);
    const body = JSON.stringify({ role: 'bench', jwt });
    // First login fetches discovery and keys; the measured ones use the cache.
    const first = await fetch(`${world.serverUrl}/v1/auth/cloud/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    if (first.status !== 200) throw new Error(`login: HTTP ${first.status} ${await first.text()}`);
    const discoveryUrl = `${emu.url}/${emu.tenantId}/.well-known/openid-configuration`;

    const rounds = { bare: [] as number[], bare64: [] as number[], login: [] as Array<Throughput & { cpu?: Record<'main' | 'all' | 'writer' | 'pool' | 'v8' | 'loadGenerator', number> }>, audited: [] as Array<Throughput & { cpuUs?: number }> };
    const loginLoad = () => load(`${world.serverUrl}/v1/auth/cloud/login`, { seconds, method: 'POST', body, headers: { 'content-type': 'application/json' } });
    let directoryCalls = 0;
    for (let i = 0; i < 2; i++) {
      const verify = async (inFlight: number) =>
        Number((await child(SERVERS, ['jose-verify', discoveryUrl, RESOURCE, String(seconds), String(inFlight), jwt], { NODE_EXTRA_CA_CERTS: world.caFile })).info.perSecond);
      rounds.bare.push(await verify(1));
      rounds.bare64.push(await verify(64));
      const before = await world.control('GET', '/bench/log');
      const cpuBefore = processCpu(world.serverPid);
      const generatorBefore = processCpu(process.pid);
      const round = await loginLoad();
      const cpuAfter = processCpu(world.serverPid);
      const generatorAfter = processCpu(process.pid);
      const logins = round.rps * seconds;
      const perLogin = (name: string) => ((cpuAfter?.byName[name] ?? 0) - (cpuBefore?.byName[name] ?? 0)) / logins;
      const cpu = cpuBefore && cpuAfter ? {
        main: (cpuAfter.main - cpuBefore.main) / logins, all: (cpuAfter.all - cpuBefore.all) / logins,
        writer: perLogin('WorkerThread'), pool: perLogin('libuv-worker'), v8: perLogin('V8Worker'),
        loadGenerator: ((generatorAfter?.all ?? 0) - (generatorBefore?.all ?? 0)) / logins,
      } : undefined;
      rounds.login.push({ ...round, cpu });
      const log = await world.control('GET', `/bench/log?since=${before.next}`);
      directoryCalls += log.login + log.graph + log.arm;
      await benchAuditDevice(world.serverUrl, join(world.dir, `audit-${i}.log`));
      const auditedBefore = processCpu(world.serverPid);
      const audited = await loginLoad();
      const auditedAfter = processCpu(world.serverPid);
      rounds.audited.push({ ...audited, cpuUs: auditedBefore && auditedAfter ? ((auditedAfter.all - auditedBefore.all) / (audited.rps * seconds)) * 1e6 : undefined });
      await benchAuditDevice(world.serverUrl, undefined);
    }
    const bare = Math.max(...rounds.bare);
    const bare64 = Math.max(...rounds.bare64);
    const login = rounds.login.reduce((a, b) => (b.rps > a.rps ? b : a));
    const r = ratio(login.rps, bare);
    const ok = r >= 0.4 && login.rps > VAULT_LOGINS_PER_SECOND;
    const audited = rounds.audited.reduce((a, b) => (b.rps > a.rps ? b : a));
    const ra = ratio(audited.rps, login.rps);
    return [
      `cloud auth: bare jose jwtVerify loop (RS256, same token, keys, options)  ${fmt(bare)} verifies/s`,
      `cloud auth: the same with 64 verifies in flight (crypto thread pool)      ${fmt(bare64)} verifies/s`,
      `cloud auth: login over HTTP, SP-bound role, cached JWKS                 ${fmt(login.rps)} logins/s (p99 ${login.p99} ms, errors ${login.errors}, directory calls during load ${directoryCalls})`,
      ...(login.cpu ? [`cloud auth: server CPU per login ${fmt(login.cpu.all * 1e6)} µs: request thread ${fmt(login.cpu.main * 1e6)}, SQLite writer ${fmt(login.cpu.writer * 1e6)}, libuv pool (RSA verify) ${fmt(login.cpu.pool * 1e6)}, V8 helpers (GC) ${fmt(login.cpu.v8 * 1e6)}; ` +
        `load generator (autocannon, same 2 cores) ${fmt(login.cpu.loadGenerator * 1e6)}`] : []),
      `cloud auth: ratio ${fmt(r, 2)}x the loop (target >= 0.40x; ${fmt(ratio(login.rps, bare64), 2)}x the 64-in-flight figure); vs Vault AppRole ${fmt(VAULT_LOGINS_PER_SECOND)}/s: ${fmt(ratio(login.rps, VAULT_LOGINS_PER_SECOND), 2)}x ${ok ? 'OK' : 'BELOW TARGET'}`,
      `cloud auth: the same logins, file audit device                          ${fmt(audited.rps)} logins/s (p99 ${audited.p99} ms, errors ${audited.errors}${audited.cpuUs === undefined ? '' : `, server CPU ${fmt(audited.cpuUs)} µs per login`})`,
      `cloud auth: audited ratio ${fmt(ra, 2)}x the logins without (target >= 0.70x) ${ra >= 0.7 ? 'OK' : 'BELOW TARGET'}`,
    ];
  } finally {
    await world.close();
  }
}
