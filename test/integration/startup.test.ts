// Nothing strands an operator: what the server process does at start and stop, with real processes (signals, kill -9,
// OS locks, ports): the root token shown before anything can fail, one server per SQLite store, a missing unseal key
// refused, each start-up failure one line with a documented exit code, `--help`/`--version`, `npm start` stopped by a
// signal to npm, the warnings that matter as blocks on stderr, and the log lines of stopping, following and leading.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as listenOn, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { VERSION } from '../../src/core/version.ts';
import { loadSettings, settingsSchema } from '../../src/settings.ts';
import { EXIT, EXIT_CODES } from '../../src/startup.ts';
import { MAIN, runToExit, startNode, type NodeProcess } from '../support/node-process.ts';
import { freePort } from '../support/ports.ts';
import { createDatabase } from '../support/postgres.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const TOKEN = /Root token \(shown once, store it safely\):\n\n {4}(hvs\.[0-9A-Za-z]{24})\n/;

const dirs: string[] = [];
const nodes: NodeProcess[] = [];
afterEach(async () => {
  while (nodes.length) await nodes.pop()!.kill();
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});
const freshDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'strongroom-startup-'));
  dirs.push(d);
  return d;
};

/** Settings of a production start: no dev mode, no key given (so one is generated beside the store). */
const production = (dir: string, extra: Record<string, string> = {}) => ({
  STRONGROOM_STORAGE: `sqlite:${join(dir, 'data', 'strongroom.db')}`, STRONGROOM_DEV: '', STRONGROOM_DEV_ROOT_TOKEN: '', STRONGROOM_UNSEAL_KEY: '', ...extra,
});

/** A node started as `production` would be, kept for cleanup. */
async function start(dir: string, extra: Record<string, string> = {}): Promise<NodeProcess> {
  const n = await startNode('', '', production(dir, extra));
  nodes.push(n);
  return n;
}

/** Runs the server to its exit with `env` (and a free port unless given). */
async function runServer(env: Record<string, string>, args: string[] = []) {
  return runToExit([MAIN, ...args], { STRONGROOM_ADDR: `127.0.0.1:${await freePort()}`, STRONGROOM_LOG_LEVEL: 'warn', ...env });
}

/** The one line a failed start prints (anything else on stderr is a notice block, none of which is a stack trace). */
function failureLine(stderr: string): string {
  expect(stderr).not.toMatch(/^\s+at /m);
  const lines = stderr.split('\n').filter((l) => l.startsWith('strongroom: '));
  expect(lines).toHaveLength(1);
  return lines[0];
}

const rootTokenWorks = async (n: NodeProcess, token: string) => (await n.request('GET', 'auth/token/lookup-self', { token })).body?.data?.policies;

describe('the first start', () => {
  it('"the root token is shown before the bootstrap is applied": a first start whose bootstrap fails (exit 6) printed it, and it opens the store afterwards', async () => {
    const dir = freshDir();
    const bootstrap = join(dir, 'strongroom.yaml');
    writeFileSync(bootstrap, [
      'mounts:',
      '  - path: ldap',
      '    type: ldap',
      '    config: {url: "ldap://127.0.0.1:1", binddn: "cn=admin,dc=example,dc=org", bindpass: not-a-secret}',
      '    static_roles: [{name: app, username: app, rotation_period: 1h}]',
      '',
    ].join('\n'));
    const failed = await runServer({ ...production(dir), STRONGROOM_BOOTSTRAP: bootstrap });
    expect(failed.code).toBe(EXIT.bootstrap);
    const token = TOKEN.exec(failed.stdout)?.[1];
    expect(token, failed.stdout).toBeDefined();
    const n = await start(dir);
    expect(n.printed.stdout()).not.toMatch(TOKEN);
    expect(await rootTokenWorks(n, token!)).toEqual(['root']);
  });

  it('"a busy port on the first start": the token was shown, the exit is 8, and the token opens the store on the next start', async () => {
    const dir = freshDir();
    const blocker = listenOn();
    const port = await freePort();
    await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
    try {
      const failed = await runServer({ ...production(dir), STRONGROOM_ADDR: `127.0.0.1:${port}` });
      expect(failed.code).toBe(EXIT.listen);
      expect(failureLine(failed.stderr)).toBe(`strongroom: cannot listen on 127.0.0.1:${port}: the address is in use (another process listens there) (set STRONGROOM_ADDR or --addr)`);
      const token = TOKEN.exec(failed.stdout)?.[1];
      expect(token).toBeDefined();
      const n = await start(dir);
      expect(await rootTokenWorks(n, token!)).toEqual(['root']);
    } finally {
      blocker.close();
    }
  });

  it('"a missing TLS file is refused before the store is made": nothing is initialised, so nothing is lost', async () => {
    const dir = freshDir();
    const r = await runServer({ ...production(dir), STRONGROOM_TLS_CERT_FILE: join(dir, 'tls.crt.typo'), STRONGROOM_TLS_KEY_FILE: join(dir, 'tls.key') });
    expect(r.code).toBe(EXIT.settings);
    expect(failureLine(r.stderr)).toBe(`strongroom: invalid settings: STRONGROOM_TLS_CERT_FILE: cannot read "${join(dir, 'tls.crt.typo')}": no such file`);
    expect(existsSync(join(dir, 'data'))).toBe(false);
  });
});

describe('one SQLite store, one server', () => {
  it('"a second process on the same store refuses to start (exit 7), naming the holder\'s pid; the first serves on"', async () => {
    const dir = freshDir();
    const first = await start(dir);
    const second = await runServer(production(dir));
    expect(second.code).toBe(EXIT.storeInUse);
    expect(failureLine(second.stderr)).toBe(`strongroom: the store ${join(dir, 'data', 'strongroom.db')} is in use by another Strongroom process (pid ${first.proc.pid}); one SQLite store serves one server (stop that one first, or use PostgreSQL storage for several nodes)`);
    // Refused before anything was written: no token was made, the first one's key is the key.
    expect(second.stdout).not.toMatch(TOKEN);
    expect((await first.request('GET', 'sys/health', { token: null })).status).toBe(200);
  });

  it('"the lock dies with its process": after kill -9 of the holder the next start takes the store at once, and after a clean stop too', async () => {
    const dir = freshDir();
    const first = await start(dir);
    await first.kill();
    const second = await start(dir);
    expect((await second.request('GET', 'sys/health', { token: null })).status).toBe(200);
    await second.stop();
    expect(second.proc.exitCode).toBe(EXIT.stopped);
    const third = await start(dir);
    expect((await third.request('GET', 'sys/health', { token: null })).status).toBe(200);
  });
});

describe('a missing unseal key', () => {
  it('"an initialised store whose key file is gone is refused (exit 3) without generating a key; the message says how to restore it"', async () => {
    const dir = freshDir();
    await (await start(dir)).stop();
    const keyFile = join(dir, 'data', 'unseal.key');
    renameSync(keyFile, join(dir, 'backup.key'));
    const r = await runServer(production(dir));
    expect(r.code).toBe(EXIT.unseal);
    const line = failureLine(r.stderr);
    expect(line).toContain(`Restore ${keyFile} from your backup, or set STRONGROOM_UNSEAL_KEY_FILE to the backed-up key; no new key was generated`);
    expect(r.stderr).not.toContain('GENERATED');
    expect(existsSync(keyFile)).toBe(false);
    // Restored, it opens the store again.
    renameSync(join(dir, 'backup.key'), keyFile);
    await start(dir);
  });
});

describe('start-up failures', () => {
  it.each([
    ['a busy port', EXIT.listen, /cannot listen on 127\.0\.0\.1:\d+: the address is in use/, 'busy'],
    ['a port out of range', EXIT.settings, /STRONGROOM_ADDR: the port must be between 0 and 65535/, { STRONGROOM_ADDR: '127.0.0.1:99999' }],
    ['an address not on this host', EXIT.listen, /cannot listen on 192\.0\.2\.1:\d+: the address is not one of this host's/, { STRONGROOM_ADDR: '192.0.2.1:8200' }],
    ['a missing TLS key', EXIT.settings, /STRONGROOM_TLS_KEY_FILE: cannot read ".*": no such file/, 'tls'],
    ['a data directory that cannot be made', EXIT.settings, /cannot open the SQLite store .*: ENOTDIR/, 'notdir'],
    ['an unknown flag', EXIT.settings, /invalid settings: unknown flag --no-such-flag/, { args: '--no-such-flag' }],
    ['a malformed unseal key', EXIT.settings, /the unseal key from STRONGROOM_UNSEAL_KEY must be 32 bytes, base64-encoded \(make one with: openssl rand -base64 32\)/, { STRONGROOM_UNSEAL_KEY: 'abc' }],
    ['a wrong unseal key', EXIT.unseal, /cannot unseal the store: .*wrong key/, 'wrong-key'],
  ] as const)('"%s is one line on stderr, never a stack trace, with its documented exit code"', async (_name, code, message, how) => {
    const dir = freshDir();
    let env: Record<string, string> = production(dir);
    let args: string[] = [];
    const blocker = listenOn();
    if (how === 'busy') {
      const port = await freePort();
      await new Promise<void>((resolve) => blocker.listen(port, '127.0.0.1', resolve));
      env.STRONGROOM_ADDR = `127.0.0.1:${port}`;
    } else if (how === 'tls') {
      writeFileSync(join(dir, 'tls.crt'), 'x');
      env = { ...env, STRONGROOM_TLS_CERT_FILE: join(dir, 'tls.crt'), STRONGROOM_TLS_KEY_FILE: join(dir, 'nope.key') };
    } else if (how === 'notdir') {
      writeFileSync(join(dir, 'file'), 'x');
      env.STRONGROOM_STORAGE = `sqlite:${join(dir, 'file', 'data', 'strongroom.db')}`;
    } else if (how === 'wrong-key') {
      await (await start(dir)).stop();
      env.STRONGROOM_UNSEAL_KEY = randomBytes(32).toString('base64');
    } else if ('args' in how) {
      args = [how.args];
    } else {
      env = { ...env, ...how };
    }
    try {
      const r = await runServer(env, args);
      expect(r.code).toBe(code);
      expect(failureLine(r.stderr)).toMatch(message);
    } finally {
      blocker.close();
    }
  });

  it('"every exit code is documented: the README\'s settings section lists each one --help lists"', () => {
    const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
    for (const [code] of EXIT_CODES) expect(readme, `exit code ${code}`).toMatch(new RegExp(`^\\| ${code} \\|`, 'm'));
  });
});

describe('--help and --version', () => {
  it('"--help lists every setting as a flag and a variable with its default, and exits 0"', async () => {
    const r = await runToExit([MAIN, '--help'], {});
    expect(r.code).toBe(0);
    const defaults = loadSettings({}, []);
    for (const name of Object.keys(settingsSchema.shape)) {
      const flag = `--${name.slice('STRONGROOM_'.length).toLowerCase().replace(/_/g, '-')}`;
      const row = r.stdout.split('\n').find((l) => l.trim().startsWith(`${flag} `));
      expect(row, flag).toBeDefined();
      const [, variable, shown] = row!.trim().split(/\s+/);
      expect(variable).toBe(name);
      // The default shown is the default: given back as the setting, it is what an unset setting becomes.
      if (shown === 'unset') expect(defaults[name as keyof typeof defaults], name).toBeUndefined();
      else expect(loadSettings({ [name]: shown }, [])[name as keyof typeof defaults], name).toEqual(defaults[name as keyof typeof defaults]);
    }
    for (const [code] of EXIT_CODES) expect(r.stdout).toMatch(new RegExp(`^  ${code}  `, 'm'));
  });

  it.each([['--version'], ['--help']])('"%s needs no valid settings and starts nothing"', async (flag) => {
    const r = await runToExit([MAIN, flag], { STRONGROOM_ADDR: 'not an address' });
    expect(r.code).toBe(0);
    if (flag === '--version') expect(r.stdout).toBe(`strongroom ${VERSION}\n`);
  });
});

describe('npm start', () => {
  /** Whether something accepts connections on the port. */
  const listening = (port: number) => new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    }).once('error', () => resolve(false));
  });

  it.each([['SIGTERM'], ['SIGINT']] as const)('"%s to the npm process stops the server: nothing keeps the port"', async (signal) => {
    const port = await freePort();
    // A group of its own, so that whatever is left after the test (an orphan, were the server not stopped) is killed.
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: ROOT, stdio: 'ignore', detached: true,
      env: { ...process.env, STRONGROOM_DEV: '1', STRONGROOM_STORAGE: 'memory', STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_LOG_LEVEL: 'warn' },
    });
    const exited = new Promise<void>((resolve) => npm.once('exit', () => resolve()));
    try {
      await expect.poll(() => listening(port), { timeout: 30_000, interval: 100 }).toBe(true);
      npm.kill(signal);
      await exited;
      await expect.poll(() => listening(port), { timeout: 10_000, interval: 100 }).toBe(false);
    } finally {
      try {
        process.kill(-npm.pid!, 'SIGKILL');
      } catch {
        // The group is gone: nothing was left behind.
      }
    }
  });
});

describe('what an operator must see', () => {
  it('"a generated unseal key is a block on stderr naming the file and how to keep it", before the root token', async () => {
    const dir = freshDir();
    const n = await start(dir);
    const stderr = n.printed.stderr();
    expect(stderr).toMatch(/={78}\n!!! NO UNSEAL KEY WAS GIVEN: ONE WAS GENERATED\n/);
    expect(stderr).toContain(`into ${join(dir, 'data', 'unseal.key')}, beside the data it opens`);
    expect(stderr).toContain('openssl rand -base64 32');
    expect(stderr).not.toContain(readFileSync(join(dir, 'data', 'unseal.key'), 'utf8').trim());
    expect(n.printed.stdout()).toMatch(TOKEN);
  });

  it.each([
    ['dev mode', { STRONGROOM_DEV: '1' }, 'DEV MODE: NOTHING IS KEPT'],
    ['memory storage', { STRONGROOM_STORAGE: 'memory', STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64') }, 'MEMORY STORAGE: NOTHING IS KEPT'],
  ])('"%s says in a block on stderr that nothing is kept"', async (_name, env, title) => {
    const n = await startNode('memory', randomBytes(32).toString('base64'), { STRONGROOM_DEV: '', ...env });
    nodes.push(n);
    expect(n.printed.stderr()).toMatch(new RegExp(`={78}\\n!!! ${title}\\n {4}Every secret, token, policy and mount lives in this process only and is lost when it stops\\.`));
  });

  it('"the server logs when it stops"', async () => {
    const n = await start(freshDir());
    await n.stop();
    expect(n.logs.at(-1)).toMatchObject({ msg: 'strongroom stopped', signal: 'SIGTERM' });
  });

  it('"a stop signal while the modules load is not lost: the process stops with exit 0" (as PID 1 in a container, one sent before main() had its handlers was ignored)', async () => {
    const tmp = freshDir();
    const { NODE_COMPILE_CACHE: _ours, ...env } = process.env;
    const proc = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', MAIN], {
      env: { ...env, TMPDIR: tmp, STRONGROOM_DEV: '1', STRONGROOM_STORAGE: 'memory', STRONGROOM_ADDR: '127.0.0.1:0' }, stdio: 'ignore',
    });
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    // main.ts makes the compile cache's directory (here under the fresh TMPDIR) right after installing its first
    // handlers; with the cache cold, the modules then take hundreds of milliseconds to load.
    const cache = join(tmp, `strongroom-compile-cache-${process.getuid!()}`);
    for (let i = 0; i < 1_000_000 && !existsSync(cache) && proc.exitCode === null; i++) await new Promise((resolve) => setImmediate(resolve));
    proc.kill('SIGTERM');
    await exited;
    expect({ code: proc.exitCode, signal: proc.signalCode }).toEqual({ code: 0, signal: null });
  });

  it('"a stop signal sent again while the server stops changes nothing": the close finishes and the exit is 0', async () => {
    const n = await start(freshDir());
    n.proc.kill('SIGTERM');
    // The second signal lands while the close runs (it takes some milliseconds after this line); polled without a
    // timer's delay, so the repeat is sent before the exit.
    for (let i = 0; i < 100_000 && !n.logs.some((l) => l.msg === 'shutting down'); i++) await new Promise((resolve) => setImmediate(resolve));
    n.proc.kill('SIGTERM');
    await n.stop();
    expect({ code: n.proc.exitCode, signal: n.proc.signalCode }).toEqual({ code: 0, signal: null });
    expect(n.logs.at(-1)).toMatchObject({ msg: 'strongroom stopped', signal: 'SIGTERM' });
  });

  it('"a node logs when it starts following, when it leads, and when it stops leading"', async () => {
    const db = await createDatabase(inject('postgres'));
    try {
      const key = randomBytes(32).toString('base64');
      const first = await startNode(db.url, key);
      nodes.push(first);
      await expect.poll(() => first.logs.some((l) => l.msg.startsWith('this node leads the cluster')), { timeout: 10_000 }).toBe(true);
      const second = await startNode(db.url, key);
      nodes.push(second);
      const follows = second.logs.find((l) => l.msg.startsWith('this node follows'));
      expect(follows).toMatchObject({ leader: first.logs.find((l) => l.msg.startsWith('this node leads'))!.node_id });
      await first.stop();
      expect(first.logs.some((l) => l.msg.startsWith('this node no longer leads the cluster'))).toBe(true);
      await expect.poll(() => second.logs.some((l) => l.msg.startsWith('this node leads the cluster')), { timeout: 15_000 }).toBe(true);
    } finally {
      while (nodes.length) await nodes.pop()!.kill();
      await db.drop();
    }
  });
});
