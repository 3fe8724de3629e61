// "The bootstrap file is a seed, not a time machine" (docs/security.md, audit 2026-11-28 N4, N8, (b)), against real
// server processes and real signals: logrotate's SIGHUP re-applies nothing, SIGUSR2 re-applies the file without
// undoing what an operator revoked, deleted or disabled since, and the file cannot declare a path to root.
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { applyBootstrap } from '../../src/bootstrap/apply.ts';
import { parseBootstrap } from '../../src/bootstrap/load.ts';
import { runToExit, signalAndWait, startNode, type NodeProcess } from '../support/node-process.ts';
import { startTestServer } from '../support/server.ts';

const MAIN = fileURLToPath(new URL('../../src/main.ts', import.meta.url));
const CLI = fileURLToPath(new URL('../../src/bootstrap/cli.ts', import.meta.url));

let dir: string;
const nodes: NodeProcess[] = [];
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'strongroom-bootstrap-seed-'));
});
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop();
  rmSync(dir, { recursive: true, force: true });
});

const ROLE = { creation_ldif: 'dn: cn={{.Username}},ou=x\nobjectClass: person\ncn: {{.Username}}\nsn: x\n', deletion_ldif: 'dn: cn={{.Username}},ou=x\nchangetype: delete\n' };

/** A file with one of each kind an operator may revoke, delete or disable; nothing in it needs a directory. */
function spec({ roleTtl = '1h', tokenTtl = '1h', description = 'dynamic accounts', auditFile = join(dir, 'audit.log') } = {}) {
  return {
    mounts: [
      { path: 'dir', type: 'ldap', dynamic_roles: [{ name: 'ci', default_ttl: roleTtl, ...ROLE }] },
      { path: 'spare', type: 'ldap', description },
    ],
    auth: [{ path: 'ci', type: 'cloud', roles: [{ name: 'ci', bound_service_principal_ids: ['sp-1'] }] }],
    policies: { acl: [{ name: 'ci', policy: 'path "dir/creds/*" { capabilities = ["read"] }' }] },
    audit: [{ path: 'file', type: 'file', options: { file_path: auditFile } }],
    tokens: [{ id: '${CI_TOKEN}', policies: ['ci'], ttl: tokenTtl, display_name: 'ci' }],
  };
}

function writeSpec(content: unknown): string {
  const file = join(dir, 'strongroom.yaml');
  writeFileSync(file, stringify(content));
  return file;
}

async function boot(file: string, token: string, env: Record<string, string> = {}, storage = 'memory'): Promise<NodeProcess> {
  const n = await startNode(storage, env.STRONGROOM_UNSEAL_KEY ?? randomBytes(32).toString('base64'), { STRONGROOM_BOOTSTRAP: file, CI_TOKEN: token, ...env });
  nodes.push(n);
  return n;
}

type Report = { counts: Record<string, number>; created: string[]; changed: string[]; unchanged: string[]; removed: string[]; skipped: Array<{ name: string; reason: string }>; disabled: string[] };
const reports = (n: NodeProcess) => n.logs.filter((l) => l.msg === 'bootstrap applied') as unknown as Report[];


/** SIGHUP, then proof that the node handled it: the audit file is reopened (a request after it is in the file). */
async function hangUp(n: NodeProcess, auditFile: string): Promise<void> {
  n.proc.kill('SIGHUP');
  const marker = `after-hup-${randomBytes(4).toString('hex')}`;
  for (let i = 0; i < 100; i++) {
    await n.request('GET', `sys/policies/acl/${marker}`);
    if (readFileSync(auditFile, 'utf8').includes(marker)) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error('the node wrote no audit entry after SIGHUP');
}

const names = (r: Report) => r.skipped.map((s) => s.name).sort();
const lookupSelf = async (n: NodeProcess, token: string) => (await n.request('GET', 'auth/token/lookup-self', { token })).status;

describe('SIGHUP (log rotation)', () => {
  it('"logrotate\'s SIGHUP and a bootstrap reload are separate": SIGHUP reopens the audit file and applies nothing; a revoked declared token stays revoked', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const file = writeSpec(spec());
    const n = await boot(file, token);
    expect(reports(n)).toHaveLength(1);
    expect(await lookupSelf(n, token)).toBe(200);
    expect((await n.request('POST', 'auth/token/revoke', { body: { token } })).status).toBe(204);

    await hangUp(n, join(dir, 'audit.log'));
    expect(reports(n)).toHaveLength(1);
    expect(await lookupSelf(n, token)).toBe(403);
    expect(n.proc.exitCode).toBeNull();
    // An apply SIGHUP had started would have logged by the time SIGUSR2's has: there is exactly one more report.
    const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(reports(n)).toHaveLength(2);
    expect(names(report)).toEqual(['tokens[0] (ci)']);
  });
});

describe('SIGUSR2 (re-apply the file)', () => {
  // Each row: what incident response does to a declared object, and the name the report skips it under.
  const hostile: Array<[string, (n: NodeProcess, token: string) => Promise<{ status: number }>, string, (n: NodeProcess, token: string) => Promise<boolean>]> = [
    ['a revoked declared token', (n, token) => n.request('POST', 'auth/token/revoke', { body: { token } }), 'tokens[0] (ci)', async (n, token) => (await lookupSelf(n, token)) === 200],
    ['a token that revoked itself', (n, token) => n.request('POST', 'auth/token/revoke-self', { token }), 'tokens[0] (ci)', async (n, token) => (await lookupSelf(n, token)) === 200],
    ['a deleted secrets-engine role', (n) => n.request('DELETE', 'dir/role/ci'), 'dir/role/ci', async (n) => (await n.request('GET', 'dir/role/ci')).status === 200],
    ['a deleted auth role', (n) => n.request('DELETE', 'auth/ci/role/ci'), 'auth/ci/role/ci', async (n) => (await n.request('GET', 'auth/ci/role/ci')).status === 200],
    ['a deleted policy', (n) => n.request('DELETE', 'sys/policies/acl/ci'), 'sys/policies/acl/ci', async (n) => (await n.request('GET', 'sys/policies/acl/ci')).status === 200],
    ['a disabled audit device', (n) => n.request('DELETE', 'sys/audit/file'), 'sys/audit/file', async (n) => 'file/' in (await n.request('GET', 'sys/audit')).body.data],
    ['a disabled mount (and the role under it)', (n) => n.request('DELETE', 'sys/mounts/dir'), 'dir/', async (n) => 'dir/' in (await n.request('GET', 'sys/mounts')).body.data],
    ['a disabled auth method (and the role under it)', (n) => n.request('DELETE', 'sys/auth/ci'), 'auth/ci/', async (n) => 'ci/' in (await n.request('GET', 'sys/auth')).body.data],
  ];

  it.each(hostile)('"re-applying never re-creates an object an operator revoked or deleted since the last apply": %s is skipped and reported', async (_, act, name, exists) => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const n = await boot(writeSpec(spec()), token);
    expect(await exists(n, token)).toBe(true);
    expect((await act(n, token)).status).toBeLessThan(300);
    expect(await exists(n, token)).toBe(false);

    // Twice: the second apply finds the same and says the same.
    for (let i = 0; i < 2; i++) {
      const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
      expect(report.skipped.find((s) => s.name === name)?.reason).toMatch(/outside the file/);
      expect(report.created).toEqual([]);
      expect(report.changed).toEqual([]);
      expect(await exists(n, token)).toBe(false);
    }
    const warned = n.logs.filter((l) => l.msg.startsWith('bootstrap skipped declared objects'));
    expect(warned.length).toBe(2);
    expect(JSON.stringify(n.logs)).not.toContain(token);
  });

  it('"what lives under a skipped mount is skipped with it": the disabled mount\'s role is reported, not written into nothing', async () => {
    const n = await boot(writeSpec(spec()), `ci-${randomBytes(12).toString('hex')}`);
    await n.request('DELETE', 'sys/mounts/dir');
    const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(names(report)).toEqual(['dir/', 'dir/role/ci']);
    expect(report.skipped.find((s) => s.name === 'dir/role/ci')?.reason).toBe('its mount was disabled outside the file');
  });

  it('"unless the file changed it": a changed declaration is applied again, and a token comes back only under a new id', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const file = writeSpec(spec());
    const n = await boot(file, token);
    await n.request('POST', 'auth/token/revoke', { body: { token } });
    await n.request('DELETE', 'dir/role/ci');
    await n.request('DELETE', 'sys/mounts/spare');
    // Other fields of the token change, its id does not: the tombstone holds.
    writeSpec(spec({ roleTtl: '2h', tokenTtl: '2h', description: 'back again' }));
    const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(report.created.sort()).toEqual(['dir/role/ci', 'spare/']);
    expect(names(report)).toEqual(['tokens[0] (ci)']);
    expect(report.skipped[0].reason).toMatch(/never used again; give the file another id/);
    expect((await n.request('GET', 'dir/role/ci')).body.data.default_ttl).toBe(7200);
    expect(await lookupSelf(n, token)).toBe(403);
  });

  it('"until the file\'s reference changes": a new id is created, the revoked one stays dead', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    // A file reference, so the id can change without restarting the process.
    writeFileSync(join(dir, 'token'), token);
    const byFile = { ...spec(), tokens: [{ id: `\${file:${join(dir, 'token')}}`, policies: ['ci'], ttl: '1h', display_name: 'ci' }] };
    const n = await boot(writeSpec(byFile), 'unused');
    await n.request('POST', 'auth/token/revoke', { body: { token } });
    const fresh = `ci-${randomBytes(12).toString('hex')}`;
    writeFileSync(join(dir, 'token'), fresh);
    const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(report.created).toEqual(['tokens[0] (ci)']);
    expect(report.skipped).toEqual([]);
    expect(await lookupSelf(n, fresh)).toBe(200);
    expect(await lookupSelf(n, token)).toBe(403);
    // And back to the old id: still refused, the tombstone outlives the file's change.
    writeFileSync(join(dir, 'token'), token);
    const back = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(names(back)).toEqual(['tokens[0] (ci)']);
    expect(await lookupSelf(n, token)).toBe(403);
  });

  it('"at every restart too": the tombstone is in the store, so a restart with the same file does not mint the revoked id', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const file = writeSpec(spec());
    const env = { STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64') };
    const storage = `sqlite:${join(dir, 'store.db')}`;
    const first = await boot(file, token, env, storage);
    await first.request('POST', 'auth/token/revoke', { body: { token } });
    await first.stop();
    const second = await boot(file, token, env, storage);
    expect(names(reports(second)[0])).toEqual(['tokens[0] (ci)']);
    expect(await lookupSelf(second, token)).toBe(403);
  });

  it('SIGUSR2 without a bootstrap file is logged and does not end the server', async () => {
    const n = await startNode('memory', randomBytes(32).toString('base64'));
    nodes.push(n);
    await signalAndWait(n, 'SIGUSR2', 'SIGUSR2 re-applies a bootstrap file, and none is set (STRONGROOM_BOOTSTRAP): nothing was done');
    expect((await n.request('GET', 'sys/health', { token: null })).status).toBe(200);
  });
});

describe('bringing a skipped object back (in-process)', () => {
  const load = (content: unknown) => parseBootstrap('f.yaml', stringify(content), { allowTokenIds: true });
  const file = (extra: Record<string, unknown> = {}) => load({ mounts: [{ path: 'dir', type: 'ldap', dynamic_roles: [{ name: 'ci', default_ttl: '1h', ...ROLE }] }], ...extra });

  it('"or re-create it through the API": a mount enabled again by hand (a new accessor) is filled in by the file, not skipped', async () => {
    const s = await startTestServer();
    try {
      await applyBootstrap(s.core, file());
      expect((await s.request('DELETE', 'sys/mounts/dir')).status).toBe(204);
      expect((await applyBootstrap(s.core, file())).skipped.map((x) => x.name)).toEqual(['dir/', 'dir/role/ci']);
      expect((await s.request('POST', 'sys/mounts/dir', { body: { type: 'ldap' } })).status).toBe(204);
      const report = await applyBootstrap(s.core, file());
      expect(report).toMatchObject({ created: ['dir/role/ci'], unchanged: ['dir/'], skipped: [] });
      expect((await s.request('GET', 'dir/role/ci')).status).toBe(200);
    } finally {
      await s.close();
    }
  });

  it('"a pruned object declared again later is created": prune drops the records with the mount', async () => {
    const s = await startTestServer();
    try {
      await applyBootstrap(s.core, file());
      const pruned = await applyBootstrap(s.core, load({ prune: { mounts: true } }));
      expect(pruned.removed).toContain('dir/');
      const report = await applyBootstrap(s.core, file());
      expect(report).toMatchObject({ created: ['dir/', 'dir/role/ci'], skipped: [] });
    } finally {
      await s.close();
    }
  });
});

describe('an audit device changed by the file', () => {
  it('"a bootstrap change to an audit device never leaves zero devices": a path to a missing directory keeps the old device, and the failure says so', async () => {
    const auditFile = join(dir, 'audit.log');
    const n = await boot(writeSpec(spec({ auditFile })), `ci-${randomBytes(12).toString('hex')}`);
    writeSpec(spec({ auditFile: join(dir, 'missing', 'audit.log') }));
    const failed = await signalAndWait(n, 'SIGUSR2', 'bootstrap stopped at its first failure: what is listed as created, changed, removed or disabled was applied, nothing after it');
    expect(failed.reason).toMatch(/^audit\[0\] \(line \d+\), sys\/audit\/file: POST sys\/audit\/file: 400 .*the device enabled before is kept, nothing was disabled\)$/);
    expect(failed.disabled).toEqual([]);
    const devices = (await n.request('GET', 'sys/audit')).body.data;
    expect(Object.keys(devices)).toEqual(['file/']);
    expect(devices['file/'].options.file_path).toBe(auditFile);
    // Still auditing: a request after the failed apply is in the old file.
    await n.request('GET', 'sys/policies/acl/still-audited');
    expect(readFileSync(auditFile, 'utf8')).toContain('sys/policies/acl/still-audited');
  });

  it('"disable the old only after the new one opened", and the report says what it disabled', async () => {
    const n = await boot(writeSpec(spec()), `ci-${randomBytes(12).toString('hex')}`);
    const moved = join(dir, 'moved.log');
    writeSpec(spec({ auditFile: moved }));
    const report = await signalAndWait(n, 'SIGUSR2', 'bootstrap applied') as Report;
    expect(report.changed).toEqual(['sys/audit/file']);
    expect(report.disabled).toEqual(['sys/audit/file']);
    const devices = (await n.request('GET', 'sys/audit')).body.data;
    expect(Object.keys(devices)).toEqual(['file/']);
    expect(devices['file/'].options.file_path).toBe(moved);
    // The old device's last entries and the new one's first overlap: the disable itself is in both files.
    const disable = (path: string) => readFileSync(path, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((e) => e.request?.path === 'sys/audit/file' && e.request?.operation === 'delete');
    expect(disable(join(dir, 'audit.log')).length).toBeGreaterThan(0);
    expect(disable(moved).length).toBeGreaterThan(0);
  });
});


const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

describe('tokens the file cannot declare', () => {
  // Each row: the token's fields besides its id, and the error --check and the server give.
  const hostile: Array<[string, Record<string, unknown>, string]> = [
    ['root', { policies: ['root'] }, 'tokens[0].policies: a declared token cannot hold the reserved "root" policy'],
    ['" Root " (spelt as the server would still accept it)', { policies: ['ci', ' Root '] }, 'tokens[0].policies: a declared token cannot hold the reserved "root" policy'],
    ['root in a comma list', { policies: 'ci,ROOT' }, 'tokens[0].policies: a declared token cannot hold the reserved "root" policy'],
    ['root from a reference', { policies: ['${POLICY}'] }, 'tokens[0].policies: a declared token cannot hold the reserved "root" policy'],
    ['response-wrapping', { policies: ['response-wrapping'] }, 'tokens[0].policies: a declared token cannot hold the reserved "response-wrapping" policy'],
    ['a period without explicit_max_ttl (renews forever)', { policies: ['ci'], period: '24h' }, 'tokens[0].period: a declared token cannot renew forever: a period needs an explicit_max_ttl that ends it'],
    ['a period with explicit_max_ttl 0', { policies: ['ci'], period: 3600, explicit_max_ttl: 0 }, 'tokens[0].period: a declared token cannot renew forever: a period needs an explicit_max_ttl that ends it'],
  ];
  const fileWith = (fields: Record<string, unknown>) => writeSpec({ tokens: [{ id: '${CI_TOKEN}', ...fields }] });
  const env = (token: string) => ({ CI_TOKEN: token, POLICY: 'root', STRONGROOM_DEV: '1' });

  it.each(hostile)('"the file cannot declare root-policy tokens or tokens that renew forever": %s — --check refuses it, the server refuses to start', async (_, fields, message) => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const file = fileWith(fields);
    const check = await runToExit([CLI, '--check', file], env(token));
    expect(check.code).toBe(2);
    expect(check.stderr).toMatch(new RegExp(`strongroom\\.yaml:\\d+: ${escape(message)}\n`));
    const storeDir = join(dir, 'data');
    const start = await runToExit([MAIN], { ...env(token), STRONGROOM_BOOTSTRAP: file, STRONGROOM_STORAGE: `sqlite:${join(storeDir, 'db')}`, STRONGROOM_ADDR: '127.0.0.1:0' });
    expect(start.code).toBe(2);
    expect(start.stderr).toMatch(new RegExp(`strongroom\\.yaml:\\d+: ${escape(message)}\n`));
    expect(existsSync(storeDir)).toBe(false);
    expect(check.stderr + start.stderr + start.stdout).not.toContain(token);
  });

  it('"--check refuses them exactly as apply does": a SIGUSR2 with such a file is logged as invalid and creates nothing', async () => {
    const token = `ci-${randomBytes(12).toString('hex')}`;
    const n = await boot(writeSpec({ policies: { acl: [{ name: 'ci', policy: 'path "x" { capabilities = ["read"] }' }] } }), token, { POLICY: 'root' });
    for (const [, fields, message] of hostile) {
      fileWith(fields);
      const logged = await signalAndWait(n, 'SIGUSR2', 'bootstrap file is invalid: nothing was changed');
      expect(logged.errors).toEqual([expect.stringMatching(new RegExp(`:\\d+: ${escape(message)}$`))]);
      expect(await lookupSelf(n, token)).toBe(403);
    }
  });

  it('a period bounded by explicit_max_ttl is accepted', async () => {
    const check = await runToExit([CLI, '--check', fileWith({ policies: ['ci'], period: '1h', explicit_max_ttl: '24h' })], env('x'));
    expect(check.code, check.stderr).toBe(0);
  });
});
