/**
 * Throwaway PostgreSQL for tests: one server per test run, started by `postgres-global.ts`, listening only on
 * 127.0.0.1 with trust authentication. Each test file makes its own database with `createDatabase`, so files never
 * share data. A test that stops and starts a server (reconnection) starts its own with `startPostgres`.
 *
 * Free of vitest imports, like slapd.ts, so plain Node (bench/) can start one too.
 */
import { execFile, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chownSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { freePort } from './ports.ts';

const execFileAsync = promisify(execFile);

export interface PostgresFacts {
  host: string;
  port: number;
  /** The bootstrap superuser; trust authentication on loopback, so no password. */
  user: string;
  /** The superuser's URL to the `postgres` database, for creating and dropping test databases. */
  adminUrl: string;
  /** Where initdb, pg_ctl and postgres are. */
  binDir: string;
  /** Holds the data directory, the unix socket and the server log; removed by stopPostgres. */
  dir: string;
  dataDir: string;
  /** The OS user the server runs as when we are root (PostgreSQL refuses to run as root). */
  runAs?: string;
  /** The postmaster's pid, for stopping it without pg_ctl when the run is interrupted. */
  pid: number;
}

const INSTALL_HINT =
  'PostgreSQL (initdb, pg_ctl, postgres) is required for the PostgreSQL storage tests. Install it with ' +
  '`sudo DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql` (Debian/Ubuntu) or your platform\'s PostgreSQL server package.';

/** Debian keeps each major version's binaries off PATH, in /usr/lib/postgresql/<major>/bin; the newest wins. */
function findBinDir(): string | undefined {
  const debian = '/usr/lib/postgresql';
  if (existsSync(debian)) {
    const majors = readdirSync(debian).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a));
    for (const major of majors) if (existsSync(join(debian, major, 'bin', 'initdb'))) return join(debian, major, 'bin');
  }
  const onPath = spawnSync('sh', ['-c', 'command -v initdb'], { encoding: 'utf8' });
  return onPath.status === 0 ? dirname(onPath.stdout.trim()) : undefined;
}

/** Installs PostgreSQL with apt-get when we are root; otherwise explains how. */
export function ensurePostgresInstalled(): string {
  const found = findBinDir();
  if (found) return found;
  const isRoot = process.getuid?.() === 0;
  const hasApt = spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status === 0;
  if (!isRoot || !hasApt) throw new Error(`initdb not found. ${INSTALL_HINT}`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const install = () => spawnSync('apt-get', ['install', '-y', '--no-install-recommends', 'postgresql'], { env, stdio: 'pipe' });
  let res = install();
  if (res.status !== 0) {
    spawnSync('apt-get', ['update'], { env, stdio: 'pipe' });
    res = install();
  }
  if (res.status !== 0) throw new Error(`apt-get install postgresql failed: ${res.stderr.toString().slice(-2000)}. ${INSTALL_HINT}`);
  // Debian starts a system cluster on :5432 after install; we never use it, so stop it to keep the machine quiet.
  spawnSync('sh', ['-c', 'service postgresql stop || systemctl stop postgresql'], { stdio: 'ignore' });
  const installed = findBinDir();
  if (!installed) throw new Error(`initdb still missing after install. ${INSTALL_HINT}`);
  return installed;
}

/** Root cannot run PostgreSQL: the server runs as Debian's `postgres` user, or `nobody` where there is none. */
function serverUser(): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return spawnSync('id', ['-u', 'postgres'], { stdio: 'ignore' }).status === 0 ? 'postgres' : 'nobody';
}

async function run(facts: Pick<PostgresFacts, 'binDir' | 'runAs'>, tool: string, args: string[]): Promise<void> {
  const bin = join(facts.binDir, tool);
  const [cmd, argv] = facts.runAs ? ['runuser', ['-u', facts.runAs, '--', bin, ...args]] : [bin, args];
  try {
    await execFileAsync(cmd, argv, { cwd: tmpdir() });
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${tool} ${args[0] ?? ''} failed: ${(e.stderr || e.stdout || e.message).slice(-2000)}`);
  }
}

/** Starts (or starts again) the server of `facts` on its port; resolves once it accepts connections. */
export async function startServer(facts: PostgresFacts): Promise<void> {
  const options = [
    `-p ${facts.port}`,
    `-k ${facts.dir}`,
    '-c listen_addresses=127.0.0.1',
    // Durable like a production server, so a stop mid-commit tests what production would do.
    '-c fsync=on',
    // Test files run in parallel, each with pools of its own.
    '-c max_connections=300',
  ].join(' ');
  await run(facts, 'pg_ctl', ['start', '-D', facts.dataDir, '-l', join(facts.dir, 'server.log'), '-w', '-t', '30', '-o', options]);
  facts.pid = Number(readFileSync(join(facts.dataDir, 'postmaster.pid'), 'utf8').split('\n', 1)[0]);
}

/** Stops the server of `facts`; `fast` ends sessions and rolls back what is under way, `immediate` is a crash. */
export async function stopServer(facts: PostgresFacts, mode: 'fast' | 'immediate' = 'fast'): Promise<void> {
  await run(facts, 'pg_ctl', ['stop', '-D', facts.dataDir, '-m', mode, '-w', '-t', '30']);
}

export async function startPostgres(): Promise<PostgresFacts> {
  const binDir = ensurePostgresInstalled();
  const runAs = serverUser();
  const dir = await mkdtemp(join(tmpdir(), 'strongroom-postgres-'));
  if (runAs) {
    const [uid, gid] = ['-u', '-g'].map((flag) => Number(spawnSync('id', [flag, runAs], { encoding: 'utf8' }).stdout.trim()));
    chownSync(dir, uid, gid);
  }
  const user = 'strongroom';
  const facts: PostgresFacts = { host: '127.0.0.1', port: 0, user, adminUrl: '', binDir, dir, dataDir: join(dir, 'data'), runAs, pid: 0 };
  try {
    // --no-sync: only initdb's own final fsync; the server itself runs with fsync on.
    await run(facts, 'initdb', ['-D', facts.dataDir, '--auth=trust', '-U', user, '-E', 'UTF8', '--no-locale', '--no-sync']);
    // A free port can be taken between probing and the server's bind; a few attempts cover that race.
    let lastError: unknown;
    for (let attempt = 0; attempt < 3; attempt++) {
      facts.port = await freePort();
      try {
        await startServer(facts);
        facts.adminUrl = `postgres://${user}@127.0.0.1:${facts.port}/postgres`;
        return facts;
      } catch (err) {
        lastError = err;
      }
    }
    throw lastError;
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw new Error(`PostgreSQL failed to start: ${(err as Error).message}`);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Stops our server (by its data directory, or its pid if pg_ctl cannot) and removes everything it had. */
export async function stopPostgres(facts: PostgresFacts): Promise<void> {
  if (facts.pid && alive(facts.pid)) {
    await stopServer(facts, 'immediate').catch(() => {
      // SIGQUIT is the postmaster's immediate shutdown: it takes its backends down with it.
      if (alive(facts.pid)) process.kill(facts.pid, 'SIGQUIT');
    });
  }
  await rm(facts.dir, { recursive: true, force: true });
}

export interface TestDatabase {
  name: string;
  /** postgres://<superuser>@127.0.0.1:<port>/<name> */
  url: string;
  /** Drops the database, ending any session still connected to it. */
  drop(): Promise<void>;
}

async function asAdmin(facts: Pick<PostgresFacts, 'adminUrl'>, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: facts.adminUrl });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** A fresh, empty database with a random name. */
export async function createDatabase(facts: Pick<PostgresFacts, 'adminUrl' | 'host' | 'port' | 'user'>): Promise<TestDatabase> {
  const name = `strongroom_${randomBytes(6).toString('hex')}`;
  await asAdmin(facts, `CREATE DATABASE ${name}`);
  return {
    name,
    url: `postgres://${facts.user}@${facts.host}:${facts.port}/${name}`,
    drop: () => asAdmin(facts, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`),
  };
}
