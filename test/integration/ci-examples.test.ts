// examples/ci's services, started as the CI would start them: the Strongroom service's environment is the image's
// ENV, then (GitLab) every variable of the job, which GitLab passes to services too, then the service's own; with
// the CI's secrets given test values. A client variable named like a server setting (STRONGROOM_ADDR as a URL) kills
// the service, so each file's client variables are checked against the settings, and the service must then serve
// the CI token a credential that binds to examples/ldap's directory.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { settingsSchema } from '../../src/settings.ts';
import { keyValuePairs, readDockerfile } from '../support/dockerfile.ts';
import { startExampleDirectory, type ExampleDirectory } from '../support/example-directory.ts';
import { startNode } from '../support/node-process.ts';
import { canBind } from '../support/slapd.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const read = (path: string): any => parse(readFileSync(join(ROOT, path), 'utf8'));
const gitlab = read('examples/ci/gitlab-ci.yml');
const github = read('examples/ci/github-actions.yml');
const imageEnv = keyValuePairs(readDockerfile(join(ROOT, 'Dockerfile')).at(-1)!, 'ENV');

/** What the server reads from its environment: its settings, and the cloud engine's CLOUD_* overrides. */
const isServerSetting = (name: string): boolean => name in settingsSchema.shape || name.startsWith('CLOUD_');

// The CI's secret store, with test values.
const SECRETS = { LDAP_BIND_PASSWORD: randomBytes(12).toString('hex'), STRONGROOM_CI_TOKEN: randomBytes(24).toString('hex') };

let work: string;
let directory: ExampleDirectory;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'ci-examples-'));
  directory = await startExampleDirectory(join(work, 'ldap'), SECRETS.LDAP_BIND_PASSWORD);
});
afterAll(async () => {
  await directory?.stop();
  await rm(work, { recursive: true, force: true });
});

/**
 * The service on this machine: the image's files are the checkout (its WORKDIR /app), the directory's service name
 * is the local directory, and the image's listener and volume are the test's.
 */
async function serviceServes(variables: Record<string, string>, name: string): Promise<void> {
  const local = Object.fromEntries(Object.entries(variables).map(([k, v]) =>
    [k, v.replace(/^\/app\//, ROOT).replace('//openldap:1389', `//127.0.0.1:${directory.port}`)]));
  const { STRONGROOM_ADDR: _addr, STRONGROOM_STORAGE: _storage, ...image } = imageEnv;
  const node = await startNode(`sqlite:${join(work, name, 'strongroom.db')}`, '', {
    ...image, STRONGROOM_DEV: '', STRONGROOM_DEV_ROOT_TOKEN: '', ...local,
  });
  try {
    const cred = await node.request('GET', 'ldap/static-cred/app', { token: SECRETS.STRONGROOM_CI_TOKEN });
    expect(cred.status, JSON.stringify(cred.body)).toBe(200);
    expect(await canBind(directory.url, cred.body.data.dn, cred.body.data.password)).toBe(true);
  } finally {
    await node.stop();
  }
}

describe('examples/ci/gitlab-ci.yml', () => {
  const job = gitlab.integration;
  const strongroom = (job.services as Array<Record<string, any>>).find((s) => s.alias === 'strongroom')!;
  const expand = (value: unknown): string => String(value).replace(/\$(\w+)/g, (_, n: string) => SECRETS[n as keyof typeof SECRETS] ?? '');
  const passed = { ...(gitlab.variables ?? {}), ...(job.variables ?? {}) } as Record<string, unknown>;

  it.each(Object.keys(passed))('"no variable of the job, which GitLab passes to every service, is a server setting": %s', (name) => {
    expect(isServerSetting(name)).toBe(false);
  });

  it('"the Strongroom service starts with the job\'s variables and its own, and serves the CI token a credential that binds"', { timeout: 60_000 }, async () => {
    const env = Object.fromEntries(Object.entries({ ...passed, ...strongroom.variables }).map(([k, v]) => [k, expand(v)]));
    await serviceServes(env, 'gitlab');
  });

  it('"the script reads the credential at the address its client variable names"', () => {
    expect(job.variables.VAULT_ADDR).toBe(`http://${strongroom.alias}:8200`);
    expect((job.script as string[]).join('\n')).toMatch(/"\$VAULT_ADDR\/v1\/ldap\/static-cred\/app"/);
  });
});

describe('examples/ci/github-actions.yml', () => {
  const job = github.jobs.integration;
  const expand = (value: unknown): string => String(value).replace(/\$\{\{\s*secrets\.(\w+)\s*\}\}/g, (_, n: string) => SECRETS[n as keyof typeof SECRETS] ?? '');
  const stepVariables = (job.steps as Array<{ env?: Record<string, string> }>).flatMap((s) => Object.keys(s.env ?? {}));

  it.each([...new Set(stepVariables)])('"no client variable of a step is a server setting, so the README\'s and the services\' names never mix": %s', (name) => {
    expect(name === 'STRONGROOM_CI_TOKEN' || !isServerSetting(name)).toBe(true);
  });

  it('"the Strongroom service starts with its env, and serves the CI token a credential that binds"', { timeout: 60_000 }, async () => {
    const env = Object.fromEntries(Object.entries(job.services.strongroom.env as Record<string, string>).map(([k, v]) => [k, expand(v)]));
    await serviceServes(env, 'github');
  });
});
