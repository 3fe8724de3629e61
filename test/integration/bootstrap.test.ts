import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { stringify } from 'yaml';
import { applyBootstrap, BootstrapApplyError } from '../../src/bootstrap/apply.ts';
import { parseBootstrap } from '../../src/bootstrap/load.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { MAIN, runToExit, signalAndWait, startNode, type NodeProcess } from '../support/node-process.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const CLI = fileURLToPath(new URL('../../src/bootstrap/cli.ts', import.meta.url));

let ou: IsolatedOu;
let dir: string;
const nodes: NodeProcess[] = [];
const servers: TestServer[] = [];
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 2 });
  dir = mkdtempSync(join(tmpdir(), 'strongroom-bootstrap-'));
});
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop();
  for (const s of servers.splice(0)) await s.close().catch(() => undefined);
  await ou.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** The example, wired to this test's OU: the bind password from a file, the token id from the environment. */
function spec(o: IsolatedOu, { rotationPeriod = '24h', policyCaps = '"read"' } = {}) {
  const userDn = `cn={{.Username}},${o.usersDn}`;
  return {
    mounts: [{
      path: 'ldap', type: 'ldap', description: 'directory for CI',
      tune: { default_lease_ttl: '1h', max_lease_ttl: '24h' },
      config: { url: facts.url, binddn: o.engine.dn, bindpass: `\${file:${join(dir, 'bindpass')}}`, userdn: o.dn, request_timeout: 5 },
      static_roles: [{ name: 'app', username: 'user0', rotation_period: rotationPeriod }],
      dynamic_roles: [{
        name: 'ci', default_ttl: '1h',
        creation_ldif: `dn: ${userDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: x\nuserPassword: {{.Password}}\n`,
        deletion_ldif: `dn: ${userDn}\nchangetype: delete\n`,
      }],
      library_sets: [{ name: 'pool', service_account_names: ['svc0', 'svc1'], ttl: '1h' }],
    }],
    policies: { acl: [{ name: 'ci', policy: `path "ldap/static-cred/*" { capabilities = [${policyCaps}] }\npath "ldap/creds/*" { capabilities = ["read"] }\npath "ldap/library/*" { capabilities = ["update"] }` }] },
    tokens: [{ id: '${CI_TOKEN}', policies: ['ci'], ttl: '1h', display_name: 'ci' }],
  };
}

function writeSpec(content: unknown, name = 'strongroom.yaml'): string {
  const file = join(dir, name);
  writeFileSync(file, typeof content === 'string' ? content : stringify(content));
  return file;
}

/** A node applying `file`, with the secrets the file references. */
async function bootNode(file: string, secrets: { token: string }, env: Record<string, string> = {}): Promise<NodeProcess> {
  writeFileSync(join(dir, 'bindpass'), `${ou.engine.password}\n`);
  const n = await startNode('memory', randomBytes(32).toString('base64'), { STRONGROOM_BOOTSTRAP: file, CI_TOKEN: secrets.token, STRONGROOM_LOG_LEVEL: 'debug', ...env });
  nodes.push(n);
  return n;
}

/** The reports logged so far. */
const reports = (n: NodeProcess) => n.logs.filter((l) => l.msg === 'bootstrap applied') as unknown as Array<{ counts: Record<string, number>; created: string[]; changed: string[]; unchanged: string[]; removed: string[] }>;

/** Sends SIGUSR2 (re-apply the file) and waits for one more log line with `msg`. */
const reapply = (n: NodeProcess, msg: string) => signalAndWait(n, 'SIGUSR2', msg);

const staticCred = async (n: NodeProcess) => (await n.request('GET', 'ldap/static-cred/app')).body.data;

describe('STRONGROOM_BOOTSTRAP at start', () => {
  it('"a bootstrap file applied to a fresh server yields every declared object": each read back and used, secrets in no log line', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const n = await bootNode(writeSpec(spec(ou)), { token });
    const [report] = reports(n);
    expect(report.created.sort()).toEqual(['ldap/config', 'ldap/library/pool', 'ldap/role/ci', 'ldap/static-role/app', 'sys/policies/acl/ci', 'tokens[0] (ci)']);
    expect(report.changed).toEqual(['ldap/']);

    expect((await n.request('GET', 'sys/mounts/ldap/tune')).body.data).toMatchObject({ default_lease_ttl: 3600, max_lease_ttl: 86400, description: 'directory for CI' });
    expect((await n.request('GET', 'ldap/config')).body.data).toMatchObject({ binddn: ou.engine.dn, userdn: ou.dn });
    // Used through the declared token, whose policy allows exactly these paths.
    const cred = (await n.request('GET', 'ldap/static-cred/app', { token })).body.data;
    expect(await canBind(facts.url, ou.users[0].dn, cred.password)).toBe(true);
    const dyn = await n.request('GET', 'ldap/creds/ci', { token });
    expect(dyn.status, JSON.stringify(dyn.body)).toBe(200);
    expect(await canBind(facts.url, dyn.body.data.distinguished_names[0], dyn.body.data.password)).toBe(true);
    const out = await n.request('POST', 'ldap/library/pool/check-out', { token });
    expect(out.status, JSON.stringify(out.body)).toBe(200);
    expect(await canBind(facts.url, `cn=${out.body.data.service_account_name},${ou.serviceAccountsDn}`, out.body.data.password)).toBe(true);
    expect((await n.request('GET', 'sys/policies/acl/ci', { token })).status).toBe(403);

    const logs = JSON.stringify(n.logs);
    for (const secret of [token, ou.engine.password, cred.password, dyn.body.data.password]) expect(logs).not.toContain(secret);
  });

  it('"applying it twice changes nothing": SIGUSR2 with the same file reports every object unchanged and rotates nothing', async () => {
    const n = await bootNode(writeSpec(spec(ou)), { token: randomBytes(12).toString('hex') });
    const before = await staticCred(n);
    const report = await reapply(n, 'bootstrap applied');
    expect(report.counts).toEqual({ created: 0, changed: 0, unchanged: 7, removed: 0, skipped: 0, disabled: 0 });
    expect(await staticCred(n)).toMatchObject({ password: before.password, last_service_rotation: before.last_service_rotation });
  });

  it('"a changed file applied by SIGUSR2 updates only what changed"', async () => {
    const file = writeSpec(spec(ou));
    const n = await bootNode(file, { token: randomBytes(12).toString('hex') });
    const before = await staticCred(n);
    writeSpec(spec(ou, { rotationPeriod: '48h', policyCaps: '"read", "list"' }));
    const report = await reapply(n, 'bootstrap applied');
    expect(report.changed.sort()).toEqual(['ldap/static-role/app', 'sys/policies/acl/ci']);
    expect(report.counts).toMatchObject({ created: 0, changed: 2, removed: 0 });
    expect((await n.request('GET', 'ldap/static-role/app')).body.data.rotation_period).toBe(172800);
    expect((await n.request('GET', 'sys/policies/acl/ci')).body.data.policy).toContain('"list"');
    // A new period is not a rotation: the served password stays.
    expect((await staticCred(n)).password).toBe(before.password);
  });

  it('"on SIGUSR2 an invalid file is logged and nothing changes" (a misspelt field, a missing variable, a bad duration): the server keeps serving', async () => {
    const n = await bootNode(writeSpec(spec(ou)), { token: randomBytes(12).toString('hex') });
    const broken = spec(ou, { rotationPeriod: 'soon' }) as Record<string, any>;
    broken.mounts[0].config.bindpass = '${NOT_SET_ANYWHERE}';
    broken.mounts[0].config.bindpas = 'a typo';
    writeSpec(broken);
    const logged = await reapply(n, 'bootstrap file is invalid: nothing was changed');
    expect(logged.errors).toEqual([
      expect.stringMatching(/:\d+: mounts\[0\]\.config\.bindpass: \$\{NOT_SET_ANYWHERE\}: the environment variable NOT_SET_ANYWHERE is not set$/),
      expect.stringMatching(/:\d+: mounts\[0\]\.config\.bindpas: unknown field "bindpas" for ldap\/config; did you mean "bindpass"\?$/),
      expect.stringMatching(/:\d+: mounts\[0\]\.static_roles\[0\]\.rotation_period: invalid duration$/),
    ]);
    expect((await n.request('GET', 'ldap/static-role/app')).body.data.rotation_period).toBe(86400);
    expect((await n.request('GET', 'sys/health', { token: null })).status).toBe(200);
  });
});


const INVALID = [
  'mounts:',
  '  - path: ldap',
  '    type: ldap',
  '    colour: blue',
  '    tune: {default_lease_ttl: 1x}',
  '    config: {url: "ldap://127.0.0.1", bindpas: x}',
  '    static_roles: [{name: app, username: u, rotation_period: 1h}, {name: APP, username: v}]',
  'tokens: [{id: fixed, policies: [ci]}]',
  '',
].join('\n');

describe('an invalid file at start', () => {
  it('"exits with code 2 and the list of errors", each with its path and line, before the store is opened', async () => {
    const storeDir = join(dir, 'data');
    const r = await runToExit([MAIN], { STRONGROOM_BOOTSTRAP: writeSpec(INVALID), STRONGROOM_DEV: '0', STRONGROOM_STORAGE: `sqlite:${join(storeDir, 'db')}`, STRONGROOM_ADDR: '127.0.0.1:0' });
    expect(r.code).toBe(2);
    const lines = r.stderr.trim().split('\n').slice(1).map((l) => l.trim().replace(/^.*?strongroom\.yaml:/, ''));
    expect(lines).toEqual([
      '4: mounts[0].colour: unknown key "colour"',
      '5: mounts[0].tune.default_lease_ttl: unknown unit in duration (units: ns, us, µs, μs, ms, s, m, h)',
      '6: mounts[0].config.bindpas: unknown field "bindpas" for ldap/config; did you mean "bindpass"?',
      '7: mounts[0].static_roles[1].name: the same name as mounts[0].static_roles[0]',
      '8: tokens[0].id: tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true',
    ]);
    expect(r.stderr).not.toContain('    at ');
    expect(existsSync(storeDir)).toBe(false);
  });

  it('"npm run bootstrap -- --check" validates offline: 0 for a valid file, 2 with the same list for an invalid one', async () => {
    writeFileSync(join(dir, 'bindpass'), 'x');
    const valid = await runToExit([CLI, '--check', writeSpec(spec(ou), 'ok.yaml')], { CI_TOKEN: 'x', STRONGROOM_DEV: '1' });
    expect(valid.code, valid.stderr).toBe(0);
    expect(valid.stdout).toContain('valid (1 mounts, 0 auth methods, 1 policies, 0 audit devices, 1 configs, 3 roles, 1 tokens)');
    const invalid = await runToExit([CLI, '--check', writeSpec(INVALID)], { STRONGROOM_DEV: '0' });
    expect(invalid.code).toBe(2);
    expect(invalid.stderr.trim().split('\n')).toHaveLength(6);
    expect(invalid.stderr).toContain('strongroom.yaml:6: mounts[0].config.bindpas: unknown field "bindpas" for ldap/config; did you mean "bindpass"?');
    // Without the token's variable the same file names what is missing.
    const missing = await runToExit([CLI, '--check', join(dir, 'ok.yaml')], { STRONGROOM_DEV: '1' });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/ok\.yaml:\d+: tokens\[0\]\.id: \$\{CI_TOKEN\}: the environment variable CI_TOKEN is not set/);
  });
});

describe('tokens with fixed ids at start', () => {
  const tokenFile = () => writeSpec({ policies: { acl: [{ name: 'ci', policy: 'path "ldap/creds/*" { capabilities = ["read"] }' }] }, tokens: [{ id: '${CI_TOKEN}', policies: ['ci'], ttl: '1h', display_name: 'ci' }] });
  const outsideDev = () => ({ STRONGROOM_DEV: '0', STRONGROOM_STORAGE: `sqlite:${join(dir, 'data', 'db')}`, STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64') });

  it('"fixed ids: dev mode only": outside it the server exits with code 2 and the error listed, before the store is opened', async () => {
    const token = randomBytes(12).toString('hex');
    const r = await runToExit([MAIN], { STRONGROOM_BOOTSTRAP: tokenFile(), CI_TOKEN: token, STRONGROOM_ADDR: '127.0.0.1:0', ...outsideDev() });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/strongroom\.yaml:\d+: tokens\[0\]\.id: tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true\n/);
    expect(r.stderr + r.stdout).not.toContain(token);
    expect(existsSync(join(dir, 'data'))).toBe(false);
  });

  it('"or allowed by a setting": STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true outside dev mode creates the token, whose id is never logged', async () => {
    const token = randomBytes(12).toString('hex');
    mkdirSync(join(dir, 'data'));
    const n = await startNode(outsideDev().STRONGROOM_STORAGE, randomBytes(32).toString('base64'), {
      STRONGROOM_BOOTSTRAP: tokenFile(), CI_TOKEN: token, STRONGROOM_DEV: '0', STRONGROOM_DEV_ROOT_TOKEN: '', STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS: 'true',
    });
    nodes.push(n);
    expect(reports(n)[0].created.sort()).toEqual(['sys/policies/acl/ci', 'tokens[0] (ci)']);
    const self = await n.request('GET', 'auth/token/lookup-self', { token });
    expect(self.status).toBe(200);
    expect(self.body.data).toMatchObject({ display_name: 'token-ci', policies: ['ci', 'default'], orphan: true });
    expect(JSON.stringify(n.logs)).not.toContain(token);
  });
});

describe('apply in-process', () => {
  async function server(): Promise<TestServer> {
    const s = await startTestServer();
    servers.push(s);
    return s;
  }
  const load = (content: unknown) => parseBootstrap('f.yaml', stringify(content), { allowTokenIds: true });

  it('"an apply that fails half-way stops at the first failure" and reports what was applied', async () => {
    const s = await server();
    const loaded = load({
      policies: { acl: [{ name: 'first', policy: 'path "a/*" { capabilities = ["read"] }' }] },
      mounts: [{ path: 'ldap', type: 'ldap', static_roles: [{ name: 'broken', username: 'nobody', rotation_period: '1s' }, { name: 'never', username: 'user1', rotation_period: '1h' }] }],
    });
    const err = await applyBootstrap(s.core, loaded).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BootstrapApplyError);
    expect((err as Error).message).toMatch(/^mounts\[0\]\.static_roles\[0\] \(line \d+\), ldap\/static-role\/broken: POST ldap\/static-role\/broken: 400 /);
    expect((err as BootstrapApplyError).report).toMatchObject({ created: ['sys/policies/acl/first'], changed: [] });
    expect((await s.request('GET', 'sys/policies/acl/first')).status).toBe(200);
    expect((await s.request('GET', 'ldap/static-role/never')).status).toBe(404);
  });

  it('"objects not in the file are left alone unless prune: true names their kind"', async () => {
    const s = await server();
    for (const name of ['keep-me', 'drop-me']) await s.request('POST', `sys/policies/acl/${name}`, { body: { policy: 'path "x" { capabilities = ["read"] }' } });
    await s.request('POST', 'sys/policies/password/other', { body: { policy: 'length = 20\nrule "charset" {\n  charset = "abcdefgh"\n}' } });
    const policy = 'path "y" { capabilities = ["read"] }';
    await applyBootstrap(s.core, load({ policies: { acl: [{ name: 'declared', policy }] } }));
    expect((await s.request('GET', 'sys/policies/acl/drop-me')).status).toBe(200);
    const report = await applyBootstrap(s.core, load({ policies: { acl: [{ name: 'declared', policy }, { name: 'keep-me', policy: 'path "x" { capabilities = ["read"] }' }], prune: { acl: true } } }));
    expect(report.removed).toEqual(['sys/policies/acl/drop-me']);
    expect((await s.request('LIST', 'sys/policies/acl')).body.data.keys.sort()).toEqual(['declared', 'default', 'keep-me', 'root']);
    // Password policies were not named by prune.
    expect((await s.request('GET', 'sys/policies/password/other')).status).toBe(200);
  });

  it('"a config write that does not change the bind password must not lose anything": a rotate-root is not undone', async () => {
    const s = await server();
    writeFileSync(join(dir, 'bindpass'), ou.engine.password);
    const file = (url: string) => load({ mounts: [{ path: 'ldap', type: 'ldap', config: { url, binddn: ou.engine.dn, bindpass: `\${file:${join(dir, 'bindpass')}}`, userdn: ou.dn } }] });
    await applyBootstrap(s.core, file(facts.url));
    expect((await s.request('POST', 'ldap/rotate-root')).status).toBe(204);
    // The file still holds the old password; only the url changes.
    const report = await applyBootstrap(s.core, file(`${facts.url}/`));
    expect(report.changed).toEqual(['ldap/config']);
    expect((await s.request('POST', 'ldap/static-role/after', { body: { username: 'user1', rotation_period: '1h' } })).status).toBe(204);
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
  });
});
