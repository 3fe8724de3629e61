import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'ldapts';
import { parse } from 'yaml';
import { copies, execForm, healthcheck, instructions, keyValuePairs, only, readDockerfile, type Stage } from '../support/dockerfile.ts';
import { freePort } from '../support/ports.ts';
import { canBind } from '../support/slapd.ts';

/**
 * No Docker engine runs here, so this test performs the images' recipes by hand, read from the Dockerfiles (a
 * drifted Dockerfile breaks it): the deps stage's RUN, the final stage's COPY lines, ENV, USER, CMD, HEALTHCHECK
 * and STOPSIGNAL; examples/ldap's packages and ENTRYPOINT; compose.yaml's environment for the two together.
 *
 * Run as root (as CI runs), each process is started as its image would run it: PID 1 of a PID namespace of its own
 * (Node then gets no default signal handling), as the image's USER, without capabilities or new privileges, with
 * the app read-only and its volumes the only writable paths. Otherwise (a developer's shell) it runs as the current
 * user, the app still read-only.
 */
const execFileAsync = promisify(execFile);
const imageStages = readDockerfile('Dockerfile');
const image = imageStages.at(-1)!;
const ldapImage = readDockerfile('examples/ldap/Dockerfile').at(-1)!;
const compose = parse(readFileSync('compose.yaml', 'utf8')) as { services: Record<string, Record<string, any>>; secrets: Record<string, { file: string }> };
const packageJson = JSON.parse(readFileSync('package.json', 'utf8')) as { license: string };
const isolated = process.getuid?.() === 0 && ['unshare', 'setpriv'].every((c) => existsSync(`/usr/bin/${c}`));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Compose's `${NAME:-default}` with nothing set: the demo setup exactly as `docker compose up` runs it. */
const interpolate = (value: string) => value.replace(/\$\{\w+:-([^}]*)\}/g, '$1');

/** The numeric uid and gid a USER instruction names (a name is looked up on this machine). */
function userIds(stage: Stage): [number, number] {
  const [user, group] = only(stage, 'USER').split(':');
  const id = (flag: string, v: string) => (/^\d+$/.test(v) ? Number(v) : Number(execFileSync('id', [flag, v], { encoding: 'utf8' }).trim()));
  return [id('-u', user), group ? Number(group) : id('-g', user)];
}

interface Running {
  /** The process itself (not the namespace's launcher), for signals. */
  pid: number;
  launcher: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

async function startAsImage(stage: Stage, argv: string[], opts: { cwd: string; env: Record<string, string> }): Promise<Running> {
  const [command, ...args] = isolated
    ? ['unshare', '--fork', '--pid', '--kill-child=SIGKILL', '--', 'setpriv', ...userIds(stage).map((id, i) => `--re${i ? 'gid' : 'uid'}=${id}`),
      '--clear-groups', '--no-new-privs', '--inh-caps=-all', '--bounding-set=-all', '--', ...argv]
    : argv;
  const launcher = spawn(command, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  launcher.stdout!.on('data', (d) => (output += d));
  launcher.stderr!.on('data', (d) => (output += d));
  const exited = new Promise<number | null>((r) => launcher.once('exit', (code) => r(code)));
  let pid = launcher.pid!;
  if (isolated) {
    const children = `/proc/${launcher.pid}/task/${launcher.pid}/children`;
    for (let i = 0; i < 100 && existsSync(children) && !readFileSync(children, 'utf8').trim(); i++) await sleep(20);
    pid = Number(readFileSync(children, 'utf8').trim().split(/\s+/)[0]);
  }
  return { pid, launcher, output: () => output, exited };
}

/** Runs a HEALTHCHECK command against `port` in place of the image's, until it passes (bounded). */
async function healthy(stage: Stage, imagePort: string, port: number, running: Running): Promise<boolean> {
  const [cmd, ...args] = healthcheck(stage).command.map((a) => a.replace(imagePort, String(port)));
  for (let i = 0; i < 150; i++) {
    if (running.launcher.exitCode !== null) return false;
    if (await execFileAsync(cmd === 'node' ? process.execPath : cmd, args).then(() => true, () => false)) return true;
    await sleep(100);
  }
  return false;
}

async function stop(stage: Stage, running: Running): Promise<number | null> {
  process.kill(running.pid, only(stage, 'STOPSIGNAL'));
  const timeout = sleep(10_000).then(() => 'timeout' as const);
  const result = await Promise.race([running.exited, timeout]);
  if (result === 'timeout') running.launcher.kill('SIGKILL');
  return result === 'timeout' ? null : result;
}

/** A directory the image's user owns, for a volume. */
function volume(root: string, name: string, stage: Stage): string {
  const dir = join(root, name);
  mkdirSync(dir, { recursive: true });
  if (isolated) chownSync(dir, ...userIds(stage));
  return dir;
}

let work: string;
let app: string;

/** The image's /app: the deps stage's RUN in a directory of its own, then the final stage's COPY lines. */
async function buildApp(): Promise<void> {
  const depsStage = imageStages.find((s) => s.name === 'deps')!;
  const depsDir = join(work, 'deps');
  mkdirSync(depsDir);
  for (const c of copies(depsStage)) for (const src of c.sources) cpSync(src, join(depsDir, basename(src)));
  // npm's cache goes to a directory of the test's own: the RUN line cleans the cache it used.
  await execFileAsync('sh', ['-c', only(depsStage, 'RUN')], {
    cwd: depsDir,
    env: { ...process.env, npm_config_cache: join(work, 'npm-cache'), npm_config_loglevel: 'error' },
  });
  const depsWorkdir = only(depsStage, 'WORKDIR');
  for (const c of copies(image)) {
    for (const src of c.sources) {
      // The ui stage runs ui/build.ts, which npm ci's prepare script already ran here: its output is ui/dist.
      const from = c.from === 'ui' ? src.replace(`${only(imageStages.find((st) => st.name === 'ui')!, 'WORKDIR')}/`, '') : c.from ? join(depsDir, src.replace(depsWorkdir, '')) : src;
      cpSync(from, join(app, c.dest.endsWith('/') ? join(c.dest, basename(src)) : c.dest), { recursive: true });
    }
  }
  execFileSync('chmod', ['-R', 'a-w,a+rX', app]);
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'strongroom-image-'));
  chmodSync(work, 0o755);
  app = join(work, 'app');
  mkdirSync(app);
  await buildApp();
}, 180_000);

afterAll(() => {
  if (existsSync(app)) execFileSync('chmod', ['-R', 'u+w', app]);
  rmSync(work, { recursive: true, force: true });
});

/** The image's environment (ENV), with its /data volume and port moved to this test's. */
function imageEnv(data: string, port: number): Record<string, string> {
  const env = keyValuePairs(image, 'ENV');
  return {
    ...env,
    PATH: process.env.PATH!,
    // Nothing may be written in a home directory: there is none.
    HOME: '/nonexistent',
    STRONGROOM_ADDR: env.STRONGROOM_ADDR.replace(/:\d+$/, `:${port}`).replace('0.0.0.0', '127.0.0.1'),
    STRONGROOM_STORAGE: env.STRONGROOM_STORAGE.replace('/data', data),
  };
}
const serverArgv = () => { const [, ...args] = execForm(only(image, 'CMD')); return [process.execPath, ...args]; };

describe('the Strongroom image (Dockerfile)', () => {
  it('"it runs as a numeric non-root user", so runAsNonRoot can verify it', () => {
    expect(only(image, 'USER')).toMatch(/^[1-9]\d*:[1-9]\d*$/);
  });

  it('"its labels are the OCI annotations, with the version from a build argument"', () => {
    const labels = keyValuePairs(image, 'LABEL');
    for (const key of ['title', 'description', 'source', 'licenses', 'version']) expect(labels[`org.opencontainers.image.${key}`], key).toBeTruthy();
    expect(labels['org.opencontainers.image.licenses']).toBe(packageJson.license);
    expect(labels['org.opencontainers.image.version']).toBe('${VERSION}');
    expect(instructions(image, 'ARG')).toContain(`VERSION=${(JSON.parse(readFileSync('package.json', 'utf8')) as { version: string }).version}`);
  });

  it('"the data and audit paths are its volumes, and its storage is on the data volume"', () => {
    const volumes = execForm(only(image, 'VOLUME'));
    expect(volumes).toEqual(['/data', '/var/log/strongroom']);
    expect(keyValuePairs(image, 'ENV').STRONGROOM_STORAGE).toMatch(/^sqlite:\/data\//);
  });

  it('"the build context holds only what the COPY lines take" (.dockerignore is an allow-list)', () => {
    const rules = readFileSync('.dockerignore', 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
    const sources = imageStages.flatMap((s) => copies(s).filter((c) => !c.from).flatMap((c) => c.sources));
    expect(rules[0]).toBe('*');
    expect(rules.slice(1).sort()).toEqual([...new Set(sources)].map((s) => `!${s}`).sort());
  });

  it('"no development dependency is installed"', () => {
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, { dev?: boolean }> };
    const dev = Object.entries(lock.packages).filter(([path, p]) => path && p.dev).map(([path]) => path);
    expect(dev.length).toBeGreaterThan(0);
    expect(dev.filter((path) => existsSync(join(app, path)))).toEqual([]);
    expect(existsSync(join(app, 'node_modules/typescript'))).toBe(false);
  });

  it('"a production install starts read-only as its user, answers its HEALTHCHECK and stops on its STOPSIGNAL with exit code 0"', async () => {
    const data = volume(work, 'data-plain', image);
    const port = await freePort();
    const running = await startAsImage(image, serverArgv(), { cwd: app, env: imageEnv(data, port) });
    try {
      expect(await healthy(image, '8200', port, running), running.output()).toBe(true);
      expect(running.output()).toMatch(/Root token \(shown once/);
      // The ui stage's build is in the image: the console is served (docs/console.md).
      expect((await fetch(`http://127.0.0.1:${port}/ui/`)).status).toBe(200);
      if (isolated) expect(readFileSync(`/proc/${running.pid}/status`, 'utf8')).toMatch(/^NSpid:\s+\d+\s+1$/m);
    } finally {
      expect(await stop(image, running), running.output()).toBe(0);
    }
    expect(running.output()).toMatch(/shutting down/);
    // The only files it wrote are on its volume.
    expect(readdirSync(data).sort()).toEqual(expect.arrayContaining(['strongroom.db', 'unseal.key']));
  });
});

/** examples/ldap's image: the path its Dockerfile copies a file to, back to the file in examples/ldap. */
function ldapSource(imagePath: string): string {
  const copy = copies(ldapImage).find((c) => c.dest === imagePath)!;
  return resolve('examples/ldap', copy.sources[0]);
}

interface Directory {
  url: string;
  port: number;
  running: Running;
}

/** examples/ldap's ENTRYPOINT with this machine's slapd, on a state volume of the test's own. */
async function startDirectory(state: string, password: string): Promise<Directory> {
  const secret = join(work, `bind-password-${basename(state)}`);
  writeFileSync(secret, `${password}\n`, { mode: 0o600 });
  if (isolated) chownSync(secret, ...userIds(ldapImage));
  const port = await freePort();
  const [entrypoint] = execForm(only(ldapImage, 'ENTRYPOINT'));
  const running = await startAsImage(ldapImage, [ldapSource(entrypoint)], {
    cwd: work,
    env: {
      PATH: process.env.PATH!,
      LDAP_STATE_DIR: state,
      LDAP_PORT: String(port),
      LDAP_SEED: ldapSource('/etc/strongroom-ldap/seed.ldif'),
      LDAP_BIND_PASSWORD_FILE: secret,
    },
  });
  expect(await healthy(ldapImage, '1389', port, running), running.output()).toBe(true);
  return { url: `ldap://127.0.0.1:${port}`, port, running };
}

const BIND_DN = 'cn=strongroom,ou=system,dc=example,dc=org';

async function search(url: string, dn: string, password: string): Promise<string[]> {
  const client = new Client({ url, timeout: 5000, connectTimeout: 5000 });
  try {
    if (password) await client.bind(dn, password);
    const { searchEntries } = await client.search('dc=example,dc=org', { scope: 'sub', attributes: ['1.1'] });
    return searchEntries.map((e) => e.dn);
  } finally {
    await client.unbind().catch(() => undefined);
  }
}

describe('the OpenLDAP example image (examples/ldap)', () => {
  it('"it installs the Debian slapd the test harness runs"', () => {
    const install = /apt-get install( -\S+)* ([\w. -]+?)(?=\s+&&|$)/.exec(only(ldapImage, 'RUN'))!;
    const packages = install[2].trim().split(/\s+/);
    expect(packages).toEqual(['slapd', 'ldap-utils']);
    for (const p of packages) expect(execFileSync('dpkg-query', ['-W', '-f', '${Status}', p], { encoding: 'utf8' }), p).toBe('install ok installed');
    expect(ldapImage.image).toMatch(/^debian:[a-z]+-slim$/);
  });

  it('"its entrypoint loads the seed and the bind account into an empty directory, which only that account may change, and keeps it on restart"', async () => {
    const state = volume(work, 'ldap-state', ldapImage);
    let directory = await startDirectory(state, 'first-password');
    try {
      const seeded = readFileSync(ldapSource('/etc/strongroom-ldap/seed.ldif'), 'utf8').match(/^dn: /gm)!.length;
      expect((await search(directory.url, BIND_DN, 'first-password')).length).toBe(seeded + 1);
      // Anonymous: the tree is not even visible (32, no such object).
      await expect(search(directory.url, '', '')).rejects.toMatchObject({ code: 32 });
      expect(await canBind(directory.url, BIND_DN, 'wrong-password')).toBe(false);
      const client = new Client({ url: directory.url });
      await client.bind(BIND_DN, 'first-password');
      await client.add('cn=probe,ou=dynamic,dc=example,dc=org', { objectClass: 'inetOrgPerson', cn: 'probe', sn: 'probe', userPassword: 'probe-password' });
      await client.unbind();
      expect(await canBind(directory.url, 'cn=probe,ou=dynamic,dc=example,dc=org', 'probe-password')).toBe(true);
      // A user may not change another's password or add entries.
      const probe = new Client({ url: directory.url });
      await probe.bind('cn=probe,ou=dynamic,dc=example,dc=org', 'probe-password');
      await expect(probe.add('cn=intruder,ou=dynamic,dc=example,dc=org', { objectClass: 'inetOrgPerson', cn: 'intruder', sn: 'x' })).rejects.toMatchObject({ code: 50 });
      await probe.unbind();
      expect(await stop(ldapImage, directory.running)).toBe(0);
      // A restart on the same volume keeps the directory, and a changed secret does not replace the bind password.
      directory = await startDirectory(state, 'second-password');
      expect(directory.running.output()).not.toMatch(/loaded/);
      expect(await canBind(directory.url, 'cn=probe,ou=dynamic,dc=example,dc=org', 'probe-password')).toBe(true);
      expect(await canBind(directory.url, BIND_DN, 'first-password')).toBe(true);
    } finally {
      if (directory.running.launcher.exitCode === null) await stop(ldapImage, directory.running);
    }
  });
});

describe('compose.yaml, performed by hand', () => {
  it('"docker compose up gives a working system": the CI token reads a static credential that binds, a dynamic one that binds and checks out a library account that binds, and nothing else', async () => {
    const ldapEnv = compose.services.openldap.environment as Record<string, string>;
    const directory = await startDirectory(volume(work, 'compose-ldap', ldapImage), interpolate(ldapEnv.LDAP_BIND_PASSWORD));
    const sr = compose.services.strongroom;
    const env = Object.fromEntries(Object.entries(sr.environment as Record<string, string>).map(([k, v]) => [k, interpolate(String(v))]));
    const [bootstrapSource, bootstrapTarget] = (sr.volumes as string[]).find((v) => v.endsWith(':ro'))!.split(':');
    expect(env.STRONGROOM_BOOTSTRAP).toBe(bootstrapTarget);
    expect(env.STRONGROOM_UNSEAL_KEY_FILE).toBe(`/run/secrets/${sr.secrets[0]}`);
    const port = await freePort();
    const running = await startAsImage(image, serverArgv(), {
      cwd: app,
      env: {
        ...imageEnv(volume(work, 'compose-data', image), port),
        ...env,
        STRONGROOM_BOOTSTRAP: resolve(bootstrapSource),
        STRONGROOM_UNSEAL_KEY_FILE: resolve(interpolate(compose.secrets[sr.secrets[0]].file)),
        LDAP_URL: env.LDAP_URL.replace('openldap:1389', `127.0.0.1:${directory.port}`),
      },
    });
    try {
      expect(await healthy(image, '8200', port, running), running.output()).toBe(true);
      const call = async (method: string, path: string) => {
        const res = await fetch(`http://127.0.0.1:${port}/v1/${path}`, { method, headers: { 'X-Service-Token': env.STRONGROOM_CI_TOKEN } });
        return { status: res.status, body: (await res.json().catch(() => ({}))) as { data: Record<string, any> } };
      };
      const stat = await call('GET', 'ldap/static-cred/app');
      expect(stat.status, JSON.stringify(stat.body)).toBe(200);
      expect(await canBind(directory.url, stat.body.data.dn, stat.body.data.password), JSON.stringify(stat.body.data)).toBe(true);
      const dyn = await call('GET', 'ldap/creds/ci');
      expect(dyn.status, JSON.stringify(dyn.body)).toBe(200);
      expect(await canBind(directory.url, dyn.body.data.distinguished_names[0], dyn.body.data.password)).toBe(true);
      const out = await call('POST', 'ldap/library/pool/check-out');
      expect(out.status, JSON.stringify(out.body)).toBe(200);
      expect(await canBind(directory.url, `cn=${out.body.data.service_account_name},ou=service-accounts,dc=example,dc=org`, out.body.data.password)).toBe(true);
      expect((await call('POST', 'ldap/library/pool/check-in')).status).toBe(200);
      for (const [method, path] of [['GET', 'sys/mounts'], ['GET', 'ldap/config'], ['POST', 'ldap/rotate-root'], ['GET', 'ldap/static-role/app'], ['POST', 'ldap/library/manage/pool/check-in']]) {
        expect((await call(method, path)).status, `${method} ${path}`).toBe(403);
      }
      // The secrets the bootstrap resolved never reach the log.
      for (const secret of [env.LDAP_BIND_PASSWORD, env.STRONGROOM_CI_TOKEN]) expect(running.output()).not.toContain(secret);
    } finally {
      expect(await stop(image, running), running.output()).toBe(0);
      await stop(ldapImage, directory.running);
    }
  });
});
