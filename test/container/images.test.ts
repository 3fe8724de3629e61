/**
 * The two images as podman built them from the Dockerfiles (unchanged, on the locally made bases: global setup), and
 * run as compose.yaml runs them: OpenLDAP, then Strongroom read-only, without capabilities or new privileges, with
 * the unseal key as a secret file, a data volume and the bootstrap file. Every container is on the host's network,
 * listening on a free loopback port.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from 'ldapts';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { composeRunArgs, exec, healthy, inspect, interpolate, logs, removeContainers, runContainer, runPrefix, seconds, stopContainer, type Container } from '../support/containers.ts';
import { copies, readDockerfile } from '../support/dockerfile.ts';
import { EXAMPLE_BIND_DN } from '../support/example-directory.ts';
import { HOST_FLAGS, podman } from '../support/podman.ts';
import { freePort } from '../support/ports.ts';
import { canBind } from '../support/slapd.ts';
import { NODE_IMAGE } from '../support/base-images.ts';

const images = inject('images');
const prefix = runPrefix(images.runId);
const compose = parse(readFileSync('compose.yaml', 'utf8')) as { services: Record<string, Record<string, any>>; secrets: Record<string, { file: string }> };
const packageJson = JSON.parse(readFileSync('package.json', 'utf8')) as { license: string; version: string };
const MB = (bytes: number) => (bytes / 1e6).toFixed(1);

const started: string[] = [];
afterAll(() => removeContainers(started));

async function start(name: string, args: string[]): Promise<Container> {
  started.push(`${prefix}${name}`);
  return runContainer(`${prefix}${name}`, args);
}

/** The image's filesystem, mounted read-only for the duration of `use`. */
async function withImageFiles<T>(ref: string, use: (root: string) => T): Promise<T> {
  const root = (await podman(['image', 'mount', ref])).stdout.trim();
  try {
    return use(root);
  } finally {
    await podman(['image', 'unmount', ref]);
  }
}

describe('the Strongroom image, as built from Dockerfile', () => {
  let config: Record<string, any>;
  let healthcheck: { Test: string[] } | undefined;
  beforeAll(async () => {
    const [inspected] = JSON.parse((await podman(['image', 'inspect', images.strongroom])).stdout);
    config = inspected.Config;
    healthcheck = inspected.Healthcheck;
  });

  it('"it runs as a numeric non-root user", so runAsNonRoot can verify it', () => {
    expect(config.User).toMatch(/^[1-9]\d*:[1-9]\d*$/);
  });

  it('"its labels are the OCI annotations, with the version from a build argument"', () => {
    for (const key of ['title', 'description', 'source', 'licenses', 'version']) expect(config.Labels[`org.opencontainers.image.${key}`], key).toBeTruthy();
    expect(config.Labels['org.opencontainers.image.licenses']).toBe(packageJson.license);
    expect(config.Labels['org.opencontainers.image.version']).toBe(packageJson.version);
  });

  it('"the data and audit paths are its volumes, and its storage is on the data volume"', () => {
    expect(Object.keys(config.Volumes).sort()).toEqual(['/data', '/var/log/strongroom']);
    expect(config.Env).toContain('STRONGROOM_STORAGE=sqlite:/data/strongroom.db');
    // File audit devices may write only there (docs/audit.md "Where file devices write").
    expect(config.Env).toContain('STRONGROOM_AUDIT_DIR=/var/log/strongroom');
  });

  it('"its HEALTHCHECK and STOPSIGNAL are kept" (podman builds them into docker-format images only)', () => {
    expect(healthcheck?.Test[0]).toBe('CMD');
    expect(healthcheck?.Test.join(' ')).toMatch(/\/v1\/sys\/health/);
    expect(config.StopSignal).toBe('SIGTERM');
  });

  it('"the build context holds only what the COPY lines take" (.dockerignore is an allow-list)', () => {
    const rules = readFileSync('.dockerignore', 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));
    const sources = readDockerfile('Dockerfile').flatMap((s) => copies(s).filter((c) => !c.from).flatMap((c) => c.sources));
    expect(rules[0]).toBe('*');
    expect(rules.slice(1).sort()).toEqual([...new Set(sources)].map((s) => `!${s}`).sort());
  });

  it('"neither a development dependency nor a package manager is in the image"', async () => {
    const lock = JSON.parse(readFileSync('package-lock.json', 'utf8')) as { packages: Record<string, { dev?: boolean }> };
    const dev = Object.entries(lock.packages).filter(([path, p]) => path && p.dev).map(([path]) => path);
    expect(dev.length).toBeGreaterThan(0);
    await withImageFiles(images.strongroom, (root) => {
      expect(existsSync(join(root, 'app/node_modules/fastify')), 'a production dependency').toBe(true);
      expect(dev.filter((path) => existsSync(join(root, 'app', path)))).toEqual([]);
      for (const p of ['usr/local/bin/npm', 'usr/local/bin/npx', 'usr/local/bin/corepack', 'usr/local/lib/node_modules']) expect(existsSync(join(root, p)), p).toBe(false);
    });
  });

  it('"the machine\'s npm configuration and CA bundle reach the build as a mount only": the image holds neither', async () => {
    const given = ['.npmrc', 'ca.crt'].map((f) => join(images.npmHome, f)).filter((f) => existsSync(f));
    expect(given.length, 'the build was given the npm configuration').toBeGreaterThan(0);
    await withImageFiles(images.strongroom, (root) => {
      // Not by name, nor by content under another name (a file of the same size and bytes).
      expect(execFileSync('find', [root, '-xdev', '-name', '*npmrc', '-o', '-name', 'ca.crt'], { encoding: 'utf8' }).trim()).toBe('');
      for (const file of given) {
        const content = readFileSync(file);
        const sameSize = execFileSync('find', [root, '-xdev', '-type', 'f', '-size', `${content.length}c`], { encoding: 'utf8' }).split('\n').filter(Boolean);
        expect(sameSize.filter((f) => readFileSync(f).equals(content)), file).toEqual([]);
      }
      expect(execFileSync('ls', ['-A', join(root, 'root')], { encoding: 'utf8' }).split('\n').filter(Boolean).sort()).toEqual(['.bashrc', '.profile']);
    });
  });

  it('"its size": what it adds to the node:24-slim base, and what the locally made base weighs', () => {
    const image = images.sizes[images.strongroom];
    const base = images.sizes[NODE_IMAGE];
    console.log(`image ${MB(image)} MB = locally made ${NODE_IMAGE} ${MB(base)} MB + ${MB(image - base)} MB`);
    // node_modules after the trim (48 MB), src/ (1.5 MB) and the bootstrap example: what docs/container.md counts.
    expect(image - base).toBeLessThan(70e6);
  });
});

/** examples/ldap's search as a client of the directory: the entries' DNs. */
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

/** compose.yaml with one service's environment replaced (a directory with a password of the test's). */
const withEnvironment = (service: string, environment: Record<string, string>) =>
  ({ ...compose, services: { ...compose.services, [service]: { ...compose.services[service], environment } } });

const ldapListen = (port: number) => ({ LDAP_HOST: '127.0.0.1', LDAP_PORT: String(port) });
const strongroomListen = (port: number) => ({ STRONGROOM_ADDR: `127.0.0.1:${port}` });

describe('the OpenLDAP image, as built from examples/ldap/Dockerfile', () => {
  it('"it installs Debian\'s slapd and ldap-utils", the packages the test harness runs', async () => {
    const { stdout } = await podman(['run', '--rm', '--entrypoint', 'dpkg-query', ...HOST_FLAGS, images.openldap, '-W', '-f', '${Package} ${db:Status-Status}\n', 'slapd', 'ldap-utils']);
    expect(stdout.trim().split('\n').sort()).toEqual(['ldap-utils installed', 'slapd installed']);
  });

  it('"its entrypoint loads the seed and the bind account into an empty directory, which only that account may change, and keeps it on restart"', async () => {
    const port = await freePort();
    const url = `ldap://127.0.0.1:${port}`;
    const args = (password: string) => composeRunArgs(withEnvironment('openldap', { LDAP_BIND_PASSWORD: password }), 'openldap',
      { image: images.openldap, volumePrefix: `${prefix}entrypoint-`, hostPorts: { openldap: port, strongroom: 0 }, listen: ldapListen });
    let directory = await start('entrypoint-1', args('first-password'));
    await healthy(directory);
    const seeded = readFileSync('examples/ldap/seed.ldif', 'utf8').match(/^dn: /gm)!.length;
    expect((await search(url, EXAMPLE_BIND_DN, 'first-password')).length).toBe(seeded + 1);
    // Anonymous: the tree is not even visible (32, no such object).
    await expect(search(url, '', '')).rejects.toMatchObject({ code: 32 });
    expect(await canBind(url, EXAMPLE_BIND_DN, 'wrong-password')).toBe(false);
    const client = new Client({ url });
    await client.bind(EXAMPLE_BIND_DN, 'first-password');
    await client.add('cn=probe,ou=dynamic,dc=example,dc=org', { objectClass: 'inetOrgPerson', cn: 'probe', sn: 'probe', userPassword: 'probe-password' });
    await client.unbind();
    const probe = new Client({ url });
    await probe.bind('cn=probe,ou=dynamic,dc=example,dc=org', 'probe-password');
    await expect(probe.add('cn=intruder,ou=dynamic,dc=example,dc=org', { objectClass: 'inetOrgPerson', cn: 'intruder', sn: 'x' })).rejects.toMatchObject({ code: 50 });
    await probe.unbind();
    expect((await stopContainer(directory.name, 10)).exitCode).toBe(0);
    // A new container on the same volume keeps the directory, and a changed secret does not replace the bind password.
    directory = await start('entrypoint-2', args('second-password'));
    await healthy(directory);
    expect(await logs(directory.name)).not.toMatch(/loaded/);
    expect(await canBind(url, 'cn=probe,ou=dynamic,dc=example,dc=org', 'probe-password')).toBe(true);
    expect(await canBind(url, EXAMPLE_BIND_DN, 'first-password')).toBe(true);
    expect((await stopContainer(directory.name, 10)).exitCode).toBe(0);
  });
});

describe('compose.yaml, run with podman', () => {
  const hostPorts: Record<string, number> = {};
  const sr = compose.services.strongroom;
  const token = interpolate(sr.environment.STRONGROOM_CI_TOKEN);
  const grace = seconds(sr.stop_grace_period);
  let ldapUrl: string;
  let server: Container;
  const strongroomArgs = () => composeRunArgs(compose, 'strongroom', { image: images.strongroom, volumePrefix: `${prefix}compose-`, hostPorts, listen: strongroomListen });

  beforeAll(async () => {
    hostPorts.openldap = await freePort();
    hostPorts.strongroom = await freePort();
    ldapUrl = `ldap://127.0.0.1:${hostPorts.openldap}`;
    // depends_on: service_healthy, as compose orders them.
    expect(sr.depends_on.openldap.condition).toBe('service_healthy');
    const directory = await start('compose-openldap', composeRunArgs(compose, 'openldap', { image: images.openldap, volumePrefix: `${prefix}compose-`, hostPorts, listen: ldapListen }));
    await healthy(directory);
    server = await start('compose-strongroom', strongroomArgs());
    await healthy(server);
    console.log(`Strongroom: start to healthy ${(server.startToHealthyMs! / 1000).toFixed(1)} s (podman run to the first passing HEALTHCHECK, bootstrap applied)`);
  });

  const call = async (method: string, path: string) => {
    const res = await fetch(`http://127.0.0.1:${hostPorts.strongroom}/v1/${path}`, { method, headers: { 'X-Service-Token': token } });
    return { status: res.status, body: (await res.json().catch(() => ({}))) as { data: Record<string, any> } };
  };

  it('"the image\'s HEALTHCHECK turns healthy", with node as PID 1 as the image\'s user', async () => {
    expect(await inspect(server.name, '{{.State.Health.Status}}')).toBe('healthy');
    expect((await exec(server.name, ['cat', '/proc/1/cmdline'])).split('\0').slice(0, 3)).toEqual(['node', '--disable-warning=ExperimentalWarning', 'src/main.ts']);
    expect((await exec(server.name, ['id', '-u'])).trim()).toBe('1000');
    expect(await exec(server.name, ['grep', '^CapEff', '/proc/1/status'])).toMatch(/^CapEff:\s+0+$/m);
    expect(await exec(server.name, ['grep', '^NoNewPrivs', '/proc/1/status'])).toMatch(/^NoNewPrivs:\s+1$/m);
  });

  it('"a start reads the compile cache the image was built with", as the image\'s user, which cannot write it', async () => {
    // `--version` loads every module a start loads; Node's debug output names each cache entry it reads.
    const out = await exec(server.name, ['sh', '-c', 'NODE_DEBUG_NATIVE=COMPILE_CACHE node --disable-warning=ExperimentalWarning src/main.ts --version 2>&1']);
    expect(out).toMatch(/reading cache from \/app\/compile-cache\/v[^/]+-1000\/\w+ for StrippedTypeScript file:\/\/\/app\/src\/server\.ts\.\.\..*\.\.\. success/);
    expect(out).toContain('V8 code cache for ESM file:///app/src/server.ts was accepted');
    expect(out).not.toMatch(/Cannot create cache directory|failed/i);
    // What a start loads only with a bootstrap file, or after it listens (the engines), was compiled at build time too.
    const later = await exec(server.name, ['sh', '-c', `NODE_DEBUG_NATIVE=COMPILE_CACHE node --input-type=module -e "await import('./src/bootstrap/run.ts'); await import('./src/engines.ts')" 2>&1`]);
    expect(later).toMatch(/reading cache from \/app\/compile-cache\/v[^/]+-1000\/\w+ for StrippedTypeScript file:\/\/\/app\/src\/bootstrap\/load\.ts\.\.\..*\.\.\. success/);
    expect(later).toMatch(/reading cache from \/app\/compile-cache\/v[^/]+-1000\/\w+ for StrippedTypeScript file:\/\/\/app\/src\/engines\/ldap\/index\.ts\.\.\..*\.\.\. success/);
    expect(await exec(server.name, ['find', '/app/compile-cache', '(', '!', '-user', '0', '-o', '-perm', '/022', ')', '-print'])).toBe('');
  });

  it('"the image serves the console at /ui/", built in its own stage, with the console\'s headers', async () => {
    const res = await fetch(`http://127.0.0.1:${hostPorts.strongroom}/ui/`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-security-policy')).toContain("frame-ancestors 'none'");
    expect(await res.text()).toContain('<script');
    // Only the build's output is in the image, never the console's sources.
    expect((await exec(server.name, ['sh', '-c', 'ls /app/ui'])).split('\n').filter(Boolean)).toEqual(['dist']);
  });

  it('"the CI token reads a static credential, issues a dynamic one and checks out a library account, each binding against the OpenLDAP container; nothing else"', async () => {
    const stat = await call('GET', 'ldap/static-cred/app');
    expect(stat.status, JSON.stringify(stat.body)).toBe(200);
    expect(await canBind(ldapUrl, stat.body.data.dn, stat.body.data.password)).toBe(true);
    const dyn = await call('GET', 'ldap/creds/ci');
    expect(dyn.status, JSON.stringify(dyn.body)).toBe(200);
    expect(await canBind(ldapUrl, dyn.body.data.distinguished_names[0], dyn.body.data.password)).toBe(true);
    const out = await call('POST', 'ldap/library/pool/check-out');
    expect(out.status, JSON.stringify(out.body)).toBe(200);
    expect(await canBind(ldapUrl, `cn=${out.body.data.service_account_name},ou=service-accounts,dc=example,dc=org`, out.body.data.password)).toBe(true);
    expect((await call('POST', 'ldap/library/pool/check-in')).status).toBe(200);
    for (const [method, path] of [['GET', 'sys/mounts'], ['GET', 'ldap/config'], ['POST', 'ldap/rotate-root'], ['GET', 'ldap/static-role/app'], ['POST', 'ldap/library/manage/pool/check-in']]) {
      expect((await call(method, path)).status, `${method} ${path}`).toBe(403);
    }
    const log = await logs(server.name);
    for (const secret of [interpolate(sr.environment.LDAP_BIND_PASSWORD), token, stat.body.data.password]) expect(log).not.toContain(secret);
  });

  it('"the server cannot write outside /data and /tmp" (and the image\'s audit volume; /dev holds devices and shared memory only)', async () => {
    // Directories the user may not read (/root) are left out: they are on the read-only root filesystem too.
    const find = "find / \\( -path /proc -o -path /sys \\) -prune -o -writable -print 2>/dev/null; true";
    const writable = (await exec(server.name, ['sh', '-c', find])).split('\n').filter(Boolean);
    expect(writable).toContain('/data');
    expect(writable).toContain('/tmp');
    expect(writable.filter((p) => !/^\/(data|tmp|var\/log\/strongroom|dev)(\/|$)/.test(p))).toEqual([]);
    await expect(exec(server.name, ['sh', '-c', 'echo x > /app/src/injected.ts'])).rejects.toThrow(/Read-only file system/);
    expect(await exec(server.name, ['ls', '/data'])).not.toMatch(/unseal\.key/);
  });

  it('"SIGTERM ends it with exit code 0 within the stop grace period", and a new container on the same volume keeps the data and unseals with the secret file', async () => {
    const before = await call('GET', 'ldap/static-cred/app');
    const stopped = await stopContainer(server.name, grace);
    expect(stopped.exitCode, await logs(server.name)).toBe(0);
    expect(stopped.seconds).toBeLessThan(grace);
    console.log(`Strongroom: podman stop (SIGTERM) to exit 0 in ${stopped.seconds.toFixed(1)} s`);
    expect(await logs(server.name)).toMatch(/shutting down/);
    await removeContainers([server.name]);
    server = await start('compose-strongroom-2', strongroomArgs());
    await healthy(server);
    const after = await call('GET', 'ldap/static-cred/app');
    expect(after.status).toBe(200);
    expect(after.body.data.password).toBe(before.body.data.password);
    expect(await canBind(ldapUrl, after.body.data.dn, after.body.data.password)).toBe(true);
    expect(await exec(server.name, ['ls', '/data'])).not.toMatch(/unseal\.key/);
    expect((await stopContainer(server.name, grace)).exitCode).toBe(0);
  });
});
