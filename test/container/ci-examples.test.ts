/**
 * examples/ci's services started from the built images as each CI starts them, and the job's steps run against
 * them. The CI's network becomes the host's: each service listens on a free loopback port (its published or aliased
 * port moved there in the variables and scripts) and its alias resolves to 127.0.0.1. The secrets get test values.
 *
 * Not run: GitHub's `actions/checkout` (the test runs in the checkout) and the GitHub step's `sudo apt-get install`
 * (the runner's package install: ldap-utils, curl and jq are on this machine, `.ci/run` installs them). GitLab's job
 * runs whole, before_script included, in its `image` (the locally made debian base).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { DEBIAN_IMAGE } from '../support/base-images.ts';
import { healthy, removeContainers, runContainer, runPrefix } from '../support/containers.ts';
import { HOST_FLAGS, podman } from '../support/podman.ts';
import { freePort } from '../support/ports.ts';

const execFileAsync = promisify(execFile);
const images = inject('images');
const prefix = runPrefix(images.runId);
const read = (path: string): any => parse(readFileSync(path, 'utf8'));
const SECRETS: Record<string, string> = { LDAP_BIND_PASSWORD: randomBytes(12).toString('hex'), STRONGROOM_CI_TOKEN: randomBytes(24).toString('hex') };

const started: string[] = [];
afterAll(() => removeContainers(started));

/** The image a CI file names for a service, as this run built it. */
const builtImage = (ref: string) => (/strongroom-openldap:/.test(ref) ? images.openldap : /strongroom:/.test(ref) ? images.strongroom : undefined);

/** The listener a service gets in place of its port (1389, 8200) on the CI's network. */
const LISTEN: Record<string, (port: number) => Record<string, string>> = {
  openldap: (port) => ({ LDAP_HOST: '127.0.0.1', LDAP_PORT: String(port) }),
  strongroom: (port) => ({ STRONGROOM_ADDR: `127.0.0.1:${port}` }),
};
const SERVICE_PORT: Record<string, number> = { openldap: 1389, strongroom: 8200 };

/** `host:1389` and `host:8200` (host 127.0.0.1 or a service's alias) moved to the services' loopback ports. */
const movePorts = (text: string, ports: Record<string, number>) =>
  Object.entries(SERVICE_PORT).reduce((t, [name, port]) => t.replace(new RegExp(`(127\\.0\\.0\\.1|${name}):${port}\\b`, 'g'), `$1:${ports[name]}`), text);

/** Starts the services together, as both CIs do, and waits for each one's HEALTHCHECK. */
async function startServices(ci: string, services: Array<{ alias: string; image: string; env: Record<string, string>; options?: string }>, ports: Record<string, number>) {
  const running = [];
  for (const s of services) {
    const image = builtImage(s.image);
    expect(image, s.image).toBeDefined();
    const env = { ...Object.fromEntries(Object.entries(s.env).map(([k, v]) => [k, movePorts(v, ports)])), ...LISTEN[s.alias](ports[s.alias]) };
    const name = `${prefix}${ci}-${s.alias}`;
    started.push(name);
    const hosts = services.filter((o) => o !== s).flatMap((o) => ['--add-host', `${o.alias}:127.0.0.1`]);
    running.push(await runContainer(name, [...hosts, ...(s.options?.split(/\s+/) ?? []), ...Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]), image!]));
  }
  for (const c of running) await healthy(c, 120_000);
}

describe('examples/ci/github-actions.yml', () => {
  const job = read('examples/ci/github-actions.yml').jobs.integration;
  const expand = (value: unknown): string => String(value).replace(/\$\{\{\s*secrets\.(\w+)\s*\}\}/g, (_, n: string) => SECRETS[n]);

  it('"the services start from the images, and the steps read a static credential and bind with it"', async () => {
    const ports = { openldap: await freePort(), strongroom: await freePort() };
    await startServices('github', Object.entries(job.services as Record<string, any>).map(([alias, s]) => ({
      alias, image: s.image, options: s.options, env: Object.fromEntries(Object.entries(s.env as Record<string, string>).map(([k, v]) => [k, expand(v)])),
    })), ports);
    const steps = job.steps as Array<{ uses?: string; run?: string; env?: Record<string, string> }>;
    expect(steps.filter((s) => s.uses).map((s) => s.uses)).toEqual(['actions/checkout@v4']);
    for (const step of steps.filter((s) => s.run)) {
      const lines = step.run!.split('\n');
      const kept = lines.filter((l) => !/apt-get install/.test(l));
      expect(lines.length - kept.length, 'only the package install is left out').toBeLessThanOrEqual(1);
      const script = movePorts(kept.join('\n'), ports);
      const env = Object.fromEntries(Object.entries(step.env ?? {}).map(([k, v]) => [k, movePorts(expand(v), ports)]));
      // GitHub's default shell for `run` on Linux.
      const { stdout } = await execFileAsync('bash', ['--noprofile', '--norc', '-eo', 'pipefail', '-c', script], { env: { PATH: process.env.PATH!, ...env }, timeout: 120_000 });
      if (/ldapwhoami/.test(script)) {
        expect(stdout).toMatch(/^dn:cn=app-db,ou=service-accounts,dc=example,dc=org$/m);
        expect(stdout).toMatch(/^::add-mask::\S+$/m);
      }
    }
  });
});

describe('examples/ci/gitlab-ci.yml', () => {
  const job = read('examples/ci/gitlab-ci.yml').integration;
  const expand = (value: unknown): string => String(value).replace(/\$(\w+)/g, (_, n: string) => SECRETS[n] ?? `$${n}`);
  const jobVariables = Object.fromEntries(Object.entries(job.variables as Record<string, string>).map(([k, v]) => [k, expand(v)]));

  it('"the services start from the images with the job\'s variables and their own, and the job\'s script, in its image, reads a credential that binds"', async () => {
    const ports = { openldap: await freePort(), strongroom: await freePort() };
    // GitLab passes the job's variables to every service, then the service's own.
    await startServices('gitlab', (job.services as Array<Record<string, any>>).map((s) => ({
      alias: s.alias, image: s.name,
      env: { ...jobVariables, ...Object.fromEntries(Object.entries(s.variables as Record<string, string>).map(([k, v]) => [k, expand(v)])) },
    })), ports);
    expect(job.image).toBe(DEBIAN_IMAGE.replace('docker.io/library/', ''));
    const script = movePorts([...job.before_script, ...job.script].join('\n'), ports);
    // The CI/CD variables (the secrets) and the job's variables, as GitLab gives them to the job.
    const env = { ...SECRETS, ...Object.fromEntries(Object.entries(jobVariables).map(([k, v]) => [k, movePorts(v, ports)])) };
    const name = `${prefix}gitlab-job`;
    started.push(name);
    const { stdout } = await podman(['run', '--name', name, ...HOST_FLAGS, '--add-host', 'strongroom:127.0.0.1', '--add-host', 'openldap:127.0.0.1',
      ...Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]), DEBIAN_IMAGE, 'bash', '-eo', 'pipefail', '-c', script], { timeoutMs: 300_000 });
    expect(stdout).toMatch(/^dn:cn=app-db,ou=service-accounts,dc=example,dc=org$/m);
  });
});
