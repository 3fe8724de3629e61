/**
 * Throwaway OpenLDAP (slapd) for tests and benchmarks: one process per test run, started by
 * `slapd-global.ts`, reachable only on 127.0.0.1. Tests isolate themselves with `createIsolatedOu`,
 * never with data another test left behind.
 *
 * Deliberately free of vitest imports so `bench/` can start the same server from plain Node.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Attribute, Change, Client, type Entry } from 'ldapts';
import { freePort } from './ports.ts';

const execFileAsync = promisify(execFile);

export interface SlapdFacts {
  /** Plain LDAP on 127.0.0.1; StartTLS is offered here too. */
  url: string;
  /** LDAPS with a certificate signed by `caCertPem`. */
  ldapsUrl: string;
  host: string;
  port: number;
  ldapsPort: number;
  baseDn: string;
  systemDn: string;
  usersDn: string;
  serviceAccountsDn: string;
  groupsDn: string;
  /** Members of this group get `manage` on the whole tree (the engine's privilege). */
  enginesGroupDn: string;
  /** Shared engine bind account. Tests that rotate a bind password must use their own (see createIsolatedOu). */
  engineDn: string;
  enginePassword: string;
  /** Only for seeding and cleanup; product code must never be configured with it. */
  rootDn: string;
  rootPassword: string;
  caCertPath: string;
  caCertPem: string;
  /** A client certificate/key signed by the same CA, for client_tls_cert/client_tls_key. */
  clientCertPem: string;
  clientKeyPem: string;
  dir: string;
  pid: number;
  /** Wall time from spawn to first successful bind, for reports. */
  startMs: number;
}

export const SLAPD_FACTS_ENV = 'STRONGROOM_SLAPD_FACTS';

const SLAPD_CANDIDATES = ['/usr/sbin/slapd', '/usr/local/sbin/slapd', '/usr/local/libexec/slapd'];
const SCHEMA_DIR_CANDIDATES = ['/etc/ldap/schema', '/etc/openldap/schema', '/usr/local/etc/openldap/schema'];
const MODULE_DIR_CANDIDATES = ['/usr/lib/ldap', '/usr/lib64/openldap', '/usr/lib/openldap', '/usr/libexec/openldap'];
const INSTALL_HINT =
  'slapd and ldap-utils are required for the LDAP tests. Install them with ' +
  '`sudo DEBIAN_FRONTEND=noninteractive apt-get install -y slapd ldap-utils` (Debian/Ubuntu) ' +
  'or your platform\'s openldap-servers + openldap-clients packages.';

export const BASE_DN = 'dc=strongroom,dc=test';

function onPath(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

function findSlapd(): string | undefined {
  return SLAPD_CANDIDATES.find((p) => existsSync(p));
}

/** Installs slapd with apt-get when we are root; otherwise explains how. */
export function ensureSlapdInstalled(): string {
  let slapd = findSlapd();
  if (slapd && onPath('ldapwhoami')) return slapd;
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!isRoot || !onPath('apt-get')) throw new Error(`slapd/ldapwhoami not found. ${INSTALL_HINT}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () =>
    spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'slapd', 'ldap-utils'], { env, stdio: 'pipe' });
  let res = install();
  if (res.status !== 0) {
    spawnSync('apt-get', ['update'], { env, stdio: 'pipe' });
    res = install();
  }
  if (res.status !== 0) throw new Error(`apt-get install slapd ldap-utils failed: ${res.stderr.toString().slice(-2000)}. ${INSTALL_HINT}`);
  // Debian starts a system slapd on :389 after install; we never use it, so stop it to keep the machine quiet.
  spawnSync('sh', ['-c', 'service slapd stop || systemctl stop slapd'], { stdio: 'ignore' });
  slapd = findSlapd();
  if (!slapd) throw new Error(`slapd still missing after install. ${INSTALL_HINT}`);
  return slapd;
}

async function openssl(args: string[], cwd: string): Promise<void> {
  try {
    await execFileAsync('openssl', args, { cwd });
  } catch (err) {
    throw new Error(`openssl ${args[0]} failed: ${(err as { stderr?: string }).stderr ?? String(err)}`);
  }
}

/** A CA plus server and client certificates; EC keys keep generation fast. */
async function makeCertificates(dir: string): Promise<void> {
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  await writeFile(join(dir, 'server.ext'),
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n' +
    'extendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n');
  await writeFile(join(dir, 'client.ext'),
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n');
  await openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '3',
    '-subj', '/CN=Strongroom Test CA', '-addext', 'basicConstraints=critical,CA:TRUE',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  for (const name of ['server', 'client']) {
    await openssl(['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`,
      '-subj', `/CN=${name === 'server' ? 'localhost' : 'strongroom-client'}`], dir);
    await openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key',
      '-CAcreateserial', '-out', `${name}.pem`, '-days', '3', '-extfile', `${name}.ext`], dir);
  }
}

function slapdConf(o: { dir: string; schemaDir: string; moduleDir?: string; rootPassword: string; enginesGroupDn: string }): string {
  const schemas = ['core', 'cosine', 'inetorgperson', 'nis'].map((s) => `include ${o.schemaDir}/${s}.schema`);
  const engines = `group/groupOfNames/member.exact="${o.enginesGroupDn}"`;
  return [
    ...schemas,
    `pidfile ${o.dir}/slapd.pid`,
    `argsfile ${o.dir}/slapd.args`,
    ...(o.moduleDir ? [`modulepath ${o.moduleDir}`, 'moduleload back_mdb'] : []),
    `TLSCACertificateFile ${o.dir}/ca.pem`,
    `TLSCertificateFile ${o.dir}/server.pem`,
    `TLSCertificateKeyFile ${o.dir}/server.key`,
    // Ask for a client certificate but accept connections without one, so client_tls_cert can be exercised.
    'TLSVerifyClient allow',
    'database mdb',
    'maxsize 1073741824',
    `suffix "${BASE_DN}"`,
    `rootdn "cn=admin,${BASE_DN}"`,
    `rootpw ${o.rootPassword}`,
    `directory ${o.dir}/data`,
    'index objectClass eq',
    'index cn,uid,member eq',
    // Engines manage everything (including their own password); users may only authenticate and change their own.
    'access to attrs=userPassword',
    `  by ${engines} manage`,
    '  by self write',
    '  by anonymous auth',
    '  by * none',
    'access to *',
    `  by ${engines} manage`,
    '  by self read',
    '  by users read',
    '  by * none',
    '',
  ].join('\n');
}

async function sleep(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

async function bindOnce(url: string, dn: string, password: string, timeoutMs = 2000): Promise<boolean> {
  const client = new Client({ url, connectTimeout: timeoutMs, timeout: timeoutMs });
  try {
    await client.bind(dn, password);
    return true;
  } catch {
    return false;
  } finally {
    await client.unbind().catch(() => undefined);
  }
}

/** Whether the process still exists (a stopped slapd, say). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function startSlapd(): Promise<SlapdFacts> {
  const slapd = ensureSlapdInstalled();
  if (!onPath('openssl')) throw new Error('openssl CLI is required to make the test CA');
  const schemaDir = SCHEMA_DIR_CANDIDATES.find((d) => existsSync(join(d, 'core.schema')));
  if (!schemaDir) throw new Error(`OpenLDAP schema directory not found (tried ${SCHEMA_DIR_CANDIDATES.join(', ')})`);
  // Debian builds back_mdb as a module; other builds link it in statically.
  const moduleDir = MODULE_DIR_CANDIDATES.find((d) => existsSync(join(d, 'back_mdb.so')) || existsSync(join(d, 'back_mdb.la')));

  const dir = await mkdtemp(join(tmpdir(), 'strongroom-slapd-'));
  await mkdir(join(dir, 'data'));
  await makeCertificates(dir);
  const rootPassword = randomBytes(18).toString('base64url');
  const enginePassword = randomBytes(18).toString('base64url');
  const enginesGroupDn = `cn=engines,ou=groups,${BASE_DN}`;
  await writeFile(join(dir, 'slapd.conf'), slapdConf({ dir, schemaDir, moduleDir, rootPassword, enginesGroupDn }), { mode: 0o600 });

  // A free port can be taken between probing and slapd's bind; a few attempts cover that race.
  let lastError = '';
  for (let attempt = 0; attempt < 3; attempt++) {
    const [port, ldapsPort] = [await freePort(), await freePort()];
    const url = `ldap://127.0.0.1:${port}`;
    const ldapsUrl = `ldaps://127.0.0.1:${ldapsPort}`;
    const started = performance.now();
    // -d 0 keeps slapd in the foreground, so its pid is the child's pid and its stderr is ours to read.
    const child = spawn(slapd, ['-f', join(dir, 'slapd.conf'), '-h', `${url}/ ${ldapsUrl}/`, '-d', '0'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: false,
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => { stderr = (stderr + d.toString()).slice(-4000); });
    let exited = false;
    child.once('exit', () => { exited = true; });
    const rootDn = `cn=admin,${BASE_DN}`;
    let ready = false;
    for (let i = 0; i < 200 && !exited; i++) {
      if (await bindOnce(url, rootDn, rootPassword, 500)) { ready = true; break; }
      await sleep(25);
    }
    if (!ready) {
      if (!exited && child.pid) process.kill(child.pid, 'SIGKILL');
      lastError = stderr || 'slapd did not become ready within 10 s';
      continue;
    }
    const startMs = Math.round(performance.now() - started);
    child.stderr!.removeAllListeners('data');
    child.stderr!.resume();
    child.unref();
    (child.stderr as unknown as { unref?: () => void }).unref?.();
    const facts: SlapdFacts = {
      url, ldapsUrl, host: '127.0.0.1', port, ldapsPort,
      baseDn: BASE_DN,
      systemDn: `ou=system,${BASE_DN}`,
      usersDn: `ou=users,${BASE_DN}`,
      serviceAccountsDn: `ou=service-accounts,${BASE_DN}`,
      groupsDn: `ou=groups,${BASE_DN}`,
      enginesGroupDn,
      engineDn: `cn=engine,ou=system,${BASE_DN}`,
      enginePassword,
      rootDn, rootPassword,
      caCertPath: join(dir, 'ca.pem'),
      caCertPem: await readFile(join(dir, 'ca.pem'), 'utf8'),
      clientCertPem: await readFile(join(dir, 'client.pem'), 'utf8'),
      clientKeyPem: await readFile(join(dir, 'client.key'), 'utf8'),
      dir,
      pid: child.pid!,
      startMs,
    };
    try {
      await seed(facts);
    } catch (err) {
      await stopSlapd(facts);
      throw err;
    }
    return facts;
  }
  await rm(dir, { recursive: true, force: true });
  throw new Error(`slapd failed to start: ${lastError}`);
}

/** Stops our slapd by pid (never by name) and removes its directory. */
export async function stopSlapd(facts: Pick<SlapdFacts, 'pid' | 'dir'>): Promise<void> {
  if (alive(facts.pid)) {
    process.kill(facts.pid, 'SIGTERM');
    for (let i = 0; i < 100 && alive(facts.pid); i++) await sleep(50);
    if (alive(facts.pid)) process.kill(facts.pid, 'SIGKILL');
  }
  await rm(facts.dir, { recursive: true, force: true });
}

async function asRoot<T>(facts: Pick<SlapdFacts, 'url' | 'rootDn' | 'rootPassword'>, fn: (c: Client) => Promise<T>): Promise<T> {
  const client = new Client({ url: facts.url, connectTimeout: 5000, timeout: 10_000 });
  try {
    await client.bind(facts.rootDn, facts.rootPassword);
    return await fn(client);
  } finally {
    await client.unbind().catch(() => undefined);
  }
}

function person(cn: string, password: string): Record<string, string[]> {
  return {
    objectClass: ['inetOrgPerson'],
    cn: [cn],
    sn: [cn],
    uid: [cn],
    userPassword: [password],
  };
}

async function seed(facts: SlapdFacts): Promise<void> {
  await asRoot(facts, async (c) => {
    await c.add(BASE_DN, { objectClass: ['dcObject', 'organization'], dc: ['strongroom'], o: ['Strongroom tests'] });
    for (const ou of ['system', 'users', 'service-accounts', 'groups']) {
      await c.add(`ou=${ou},${BASE_DN}`, { objectClass: ['organizationalUnit'], ou: [ou] });
    }
    await c.add(facts.engineDn, person('engine', facts.enginePassword));
    await c.add(facts.enginesGroupDn, { objectClass: ['groupOfNames'], cn: ['engines'], member: [facts.engineDn] });
  });
}

/** Reads facts handed over by global setup through the environment (for code outside vitest's inject). */
export function slapdFactsFromEnv(): SlapdFacts {
  const raw = process.env[SLAPD_FACTS_ENV];
  if (!raw) throw new Error(`${SLAPD_FACTS_ENV} is not set: is test/support/slapd-global.ts in vitest's globalSetup?`);
  return JSON.parse(raw) as SlapdFacts;
}

/** ldapwhoami-style check: does a simple bind with these credentials succeed? */
export async function canBind(url: string, dn: string, password: string, opts: { ca?: string } = {}): Promise<boolean> {
  if (!password) return false; // an empty password would be an unauthenticated bind, which proves nothing
  const client = new Client({
    url,
    connectTimeout: 5000,
    timeout: 5000,
    ...(url.startsWith('ldaps:') ? { tlsOptions: { ca: opts.ca ? [opts.ca] : undefined } } : {}),
  });
  try {
    await client.bind(dn, password);
    return true;
  } catch (err) {
    if ((err as { code?: number }).code === 49) return false;
    throw err;
  } finally {
    await client.unbind().catch(() => undefined);
  }
}

export interface SeededAccount {
  name: string;
  dn: string;
  password: string;
}

export interface IsolatedOu {
  /** ou=<unique>,<baseDn> */
  dn: string;
  usersDn: string;
  serviceAccountsDn: string;
  groupsDn: string;
  users: SeededAccount[];
  serviceAccounts: SeededAccount[];
  /** groupOfNames whose only member is the first user (or the ou itself when there are no users). */
  groupDn: string;
  /** A bind account with the engine's privileges that only this test uses (safe to rotate). */
  engine: SeededAccount;
  /** Deletes the subtree (including anything the test added under it) and the engine's group membership. */
  cleanup(): Promise<void>;
}

export interface IsolatedOuOptions {
  /** User names, or a count (names become user0, user1...). Default 3. */
  users?: string[] | number;
  /** Service account names, or a count (svc0, svc1...). Default 3. */
  serviceAccounts?: string[] | number;
}

function names(spec: string[] | number | undefined, prefix: string): string[] {
  if (Array.isArray(spec)) return spec;
  return Array.from({ length: spec ?? 3 }, (_, i) => `${prefix}${i}`);
}

/** Each call makes a fresh subtree with known passwords, so no test relies on another's leftovers. */
export async function createIsolatedOu(facts: SlapdFacts, opts: IsolatedOuOptions = {}): Promise<IsolatedOu> {
  const id = `t-${randomBytes(6).toString('hex')}`;
  const dn = `ou=${id},${facts.baseDn}`;
  const usersDn = `ou=users,${dn}`;
  const serviceAccountsDn = `ou=service-accounts,${dn}`;
  const groupsDn = `ou=groups,${dn}`;
  const pw = () => randomBytes(12).toString('base64url');
  const users = names(opts.users, 'user').map((name) => ({ name, dn: `cn=${name},${usersDn}`, password: pw() }));
  const serviceAccounts = names(opts.serviceAccounts, 'svc').map((name) => ({ name, dn: `cn=${name},${serviceAccountsDn}`, password: pw() }));
  const engine = { name: 'engine', dn: `cn=engine,${dn}`, password: pw() };
  const groupDn = `cn=staff,${groupsDn}`;
  await asRoot(facts, async (c) => {
    await c.add(dn, { objectClass: ['organizationalUnit'], ou: [id] });
    for (const ou of ['users', 'service-accounts', 'groups']) {
      await c.add(`ou=${ou},${dn}`, { objectClass: ['organizationalUnit'], ou: [ou] });
    }
    for (const a of [...users, ...serviceAccounts, engine]) await c.add(a.dn, person(a.name, a.password));
    await c.add(groupDn, { objectClass: ['groupOfNames'], cn: ['staff'], member: [users[0]?.dn ?? dn] });
    await c.modify(facts.enginesGroupDn, new Change({ operation: 'add', modification: new Attribute({ type: 'member', values: [engine.dn] }) }));
  });
  return {
    dn, usersDn, serviceAccountsDn, groupsDn, users, serviceAccounts, groupDn, engine,
    cleanup: () => deleteSubtree(facts, dn, engine.dn),
  };
}

export async function deleteSubtree(facts: SlapdFacts, dn: string, engineDn?: string): Promise<void> {
  await asRoot(facts, async (c) => {
    if (engineDn) {
      await c.modify(facts.enginesGroupDn, new Change({ operation: 'delete', modification: new Attribute({ type: 'member', values: [engineDn] }) }))
        .catch(() => undefined);
    }
    let entries: Entry[];
    try {
      ({ searchEntries: entries } = await c.search(dn, { scope: 'sub', attributes: ['1.1'] }));
    } catch (err) {
      if ((err as { code?: number }).code === 32) return;
      throw err;
    }
    // Children before parents: more RDNs means deeper.
    const depth = (d: string) => d.split(/(?<!\\),/).length;
    for (const e of entries.sort((a, b) => depth(b.dn) - depth(a.dn))) await c.del(e.dn);
  });
}

/** Reads one entry as the rootdn (test assertions only). Attribute names are lower-cased. */
export async function readEntry(facts: SlapdFacts, dn: string): Promise<Record<string, string[]> | undefined> {
  return asRoot(facts, async (c) => {
    try {
      const { searchEntries } = await c.search(dn, { scope: 'base' });
      const e = searchEntries[0];
      if (!e) return undefined;
      const out: Record<string, string[]> = {};
      for (const [k, v] of Object.entries(e)) {
        if (k === 'dn') continue;
        out[k.toLowerCase()] = (Array.isArray(v) ? v : [v]).map((x) => (Buffer.isBuffer(x) ? x.toString('utf8') : String(x)));
      }
      return out;
    } catch (err) {
      if ((err as { code?: number }).code === 32) return undefined;
      throw err;
    }
  });
}

/** Sets an entry's password as the rootdn, as an operator resetting it by hand would (test set-up only). */
export async function resetPassword(facts: Pick<SlapdFacts, 'url' | 'rootDn' | 'rootPassword'>, dn: string, password: string): Promise<void> {
  await asRoot(facts, (c) => c.modify(dn, new Change({ operation: 'replace', modification: new Attribute({ type: 'userPassword', values: [password] }) })));
}
