/**
 * Child processes for the benchmarks, so a server never shares an event loop with the load generator:
 *   servers.ts bare            — a bare Fastify JSON route (the baseline)
 *   servers.ts strongroom DIR  — the full server on SQLite in DIR, with a stored object and a read-only token
 *                                (BENCH_METRICS=off: without metrics, the baseline of their cost)
 *   servers.ts ldap DIR        — the same, plus the real ldap/ engine configured from BENCH_LDAP (JSON:
 *                                {config, role}) with static role `bench`, readable by the same token
 *                                (and dynamic role `bench` when it also has `dynamicRole`)
 *   servers.ts dynamic-floor DIR — the durable work of a dynamic credential and no more (bench/dynamic-http.ts):
 *                                BENCH_FLOOR (JSON: {url, binddn, bindpass, usersDn, groupDn}) names the directory
 *   servers.ts leases DIR N    — registers N leases in DIR, then exits
 *   servers.ts restart DIR     — reopens DIR and reports the time to serving and RSS
 *   servers.ts emulator DIR    — the Azure emulator (TLS material from STRONGROOM_EMULATOR_TLS_CERT/KEY) with a
 *                                seeded tenant and a managed identity; writes DIR/environment.json; /bench/* control routes
 *   servers.ts jose-verify URL AUD SECONDS N JWT — a bare jose jwtVerify loop (N in flight) with the keys and
 *                                issuer of the discovery document at URL; reports verifies/s
 *   servers.ts cloud DIR       — the full server with the real cloud engines on SQLite in DIR (needs
 *                                NODE_EXTRA_CA_CERTS and CLOUD_ENVIRONMENT_FILEPATH from the parent)
 */
import Fastify from 'fastify';
import { createLocalJWKSet, jwtVerify, type JSONWebKeySet } from 'jose';
import { randomBytes } from 'node:crypto';
import { writeFileSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { createLogger } from '../src/logger.ts';
import { addManagedIdentity } from '../test/support/azure-emulator/managed-identity.ts';
import { seedTenant } from '../test/support/azure-emulator/seed.ts';
import { startEmulator } from '../test/support/azure-emulator/server.ts';
import { json } from '../test/support/azure-emulator/http.ts';
import { createServer } from '../src/server.ts';
import { ldapBackend } from '../src/engines/ldap/index.ts';
import { loadSettings } from '../src/settings.ts';
import { testBackend } from '../test/support/test-backend.ts';
import { startDynamicFloor } from './dynamic-floor.ts';
import { writeLeases } from './lease-store.ts';

const [mode, dir, count] = process.argv.slice(2);
// A normal exit on SIGINT lets --cpu-prof write its profile when profiling a server.
process.once('SIGINT', () => process.exit(0));
const ready = (info: Record<string, unknown>) => process.stdout.write(`READY ${JSON.stringify(info)}\n`);

/**
 * SQLite in DIR, or the PostgreSQL database BENCH_STORAGE names (bench/cluster.ts); BENCH_JOIN=1 starts a further
 * node on a store another child already set up, so the setup below is skipped.
 */
function settingsFor(d: string) {
  const keyFile = join(d, 'bench.key');
  if (!existsSync(keyFile)) writeFileSync(keyFile, randomBytes(32).toString('base64'));
  const storage = process.env.BENCH_STORAGE ?? `sqlite:${join(d, 'strongroom.db')}`;
  return loadSettings({ STRONGROOM_STORAGE: storage, STRONGROOM_UNSEAL_KEY: readFileSync(keyFile, 'utf8'), STRONGROOM_LOG_LEVEL: 'silent', STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: 'root',
    // The benches' audit logs lie in the run's directory (util.ts `benchAuditDevice`).
    STRONGROOM_AUDIT_DIR: d }, []);
}
const joining = process.env.BENCH_JOIN === '1';
const backends = { secret: { bench: testBackend(new Map()) }, auth: {} };

if (mode === 'bare') {
  const app = Fastify();
  app.get('/v1/bare', async () => ({ data: { value: 'x' } }));
  ready({ url: await app.listen({ host: '127.0.0.1', port: 0 }) });
} else if (mode === 'strongroom' || mode === 'ldap') {
  const ldap = mode === 'ldap' ? (JSON.parse(process.env.BENCH_LDAP ?? '{}') as { config: unknown; role: unknown; dynamicRole?: unknown }) : undefined;
  const s = await createServer(settingsFor(dir), createLogger('silent'), {
    backends: ldap ? { ...backends, secret: { ...backends.secret, ldap: ldapBackend() } } : backends, metrics: process.env.BENCH_METRICS !== 'off',
  });
  const url = await s.app.listen({ host: '127.0.0.1', port: 0 });
  if (joining) ready({ url });
  else {
    const call = async (method: string, path: string, body?: unknown, token = 'root') => {
      const res = await s.app.inject({ method: method as 'GET', url: `/v1/${path}`, headers: { 'x-service-token': token, 'content-type': 'application/json' }, payload: body === undefined ? undefined : JSON.stringify(body) });
      if (res.statusCode >= 300) throw new Error(`${method} ${path}: ${res.statusCode} ${res.body}`);
      return res;
    };
    await call('POST', 'sys/mounts/kv', { type: 'bench' });
    await call('POST', 'kv/data/app/config', { value: 'a stored value' });
    if (ldap) {
      await call('POST', 'ldap/config', ldap.config);
      await call('POST', 'ldap/static-role/bench', ldap.role);
      if (ldap.dynamicRole) await call('POST', 'ldap/role/bench', ldap.dynamicRole);
    }
    const ldapRule = ldap ? '\npath "ldap/static-cred/*" { capabilities = ["read"] }' : '';
    await call('PUT', 'sys/policies/acl/reader', { policy: `path "kv/data/app/*" { capabilities = ["read"] }\npath "kv/data/admin/*" { capabilities = ["deny"] }${ldapRule}` });
    const token = JSON.parse((await call('POST', 'auth/token/create', { policies: ['reader'] })).body).auth.client_token;
    ready({ url, token });
  }
} else if (mode === 'dynamic-floor') {
  ready({ url: await startDynamicFloor(join(dir, 'floor.db'), JSON.parse(process.env.BENCH_FLOOR ?? '{}')) });
} else if (mode === 'leases') {
  const s = await createServer(settingsFor(dir), createLogger('silent'), { backends });
  const seconds = await writeLeases(s, Number(count));
  await s.close();
  ready({ seconds });
  process.exit(0);
} else if (mode === 'restart') {
  const started = performance.now();
  const s = await createServer(settingsFor(dir), createLogger('silent'), { backends });
  const url = await s.app.listen({ host: '127.0.0.1', port: 0 });
  const res = await fetch(`${url}/v1/sys/health`);
  const ms = performance.now() - started;
  const mem = process.memoryUsage();
  const MiB = (n: number) => n / 2 ** 20;
  ready({ msToServing: ms, status: res.status, rssMiB: MiB(mem.rss), heapMiB: MiB(mem.heapUsed), heapTotalMiB: MiB(mem.heapTotal), externalMiB: MiB(mem.external) });
} else if (mode === 'emulator') {
  const emulator = await startEmulator({
    // Control routes for the benchmark (same process as the emulator's state and request log).
    extensions: [(routers) => {
      routers.login
        .add('GET', '/bench/log', (req) => {
          const since = Number(req.query.get('since') ?? 0);
          const entries = emulator.requestLog.entries.slice(since).filter((e) => e.service !== 'login' || !e.path.startsWith('/bench/'));
          const count = (service: string) => entries.filter((e) => e.service === service).length;
          return json(200, { next: emulator.requestLog.entries.length, graph: count('graph'), arm: count('arm'), login: count('login') });
        })
        .add('POST', '/bench/replication-delay', (req) => {
          const ms = Number(req.query.get('ms') ?? 0);
          emulator.faults.replicationDelay({ servicePrincipalToArm: ms, servicePrincipalToGroups: ms });
          return json(204);
        })
        .add('POST', '/bench/mint', async (req) => json(200, { token: await emulator.miTokens.mint({ identity: mi, audience: req.query.get('audience') ?? '' }) }));
    }],
  });
  const tenant = seedTenant(emulator.state, { groups: ['bench-readers'] });
  const mi = addManagedIdentity(emulator.state, { name: 'bench-workload' });
  const envFile = join(dir, 'environment.json');
  writeFileSync(envFile, JSON.stringify(emulator.environment('StrongroomEmulator')));
  ready({
    url: emulator.url, envFile, environment: 'StrongroomEmulator', tenantId: emulator.tenantId, subscriptionId: tenant.subscriptionId,
    clientId: tenant.admin.appId, clientSecret: tenant.admin.clientSecret, group: 'bench-readers', principalId: mi.principalId, issuer: emulator.miTokens.issuer,
  });
} else if (mode === 'cloud') {
  // The real registry (src/engines.ts): cloud/ and auth/cloud/ are default mounts.
  const s = await createServer(settingsFor(dir), createLogger('silent'));
  ready({ url: await s.app.listen({ host: '127.0.0.1', port: 0 }) });
} else if (mode === 'jose-verify') {
  const [, discoveryUrl, audience, seconds, inFlight, jwt] = process.argv.slice(2);
  const discovery = (await (await fetch(discoveryUrl)).json()) as { issuer: string; jwks_uri: string };
  const keys = createLocalJWKSet((await (await fetch(discovery.jwks_uri)).json()) as JSONWebKeySet);
  // The same options the login's verifier passes.
  const options = { algorithms: ['RS256'], issuer: discovery.issuer, audience, clockTolerance: 60, requiredClaims: ['exp'] };
  const until = performance.now() + Number(seconds) * 1000;
  let done = 0;
  const worker = async () => {
    while (performance.now() < until) {
      await jwtVerify(jwt, keys, { ...options, currentDate: new Date() });
      done++;
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: Number(inFlight) }, worker));
  ready({ perSecond: done / ((performance.now() - started) / 1000) });
  process.exit(0);
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
