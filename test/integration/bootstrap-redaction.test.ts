// "An apply error never holds a resolved value" (docs/bootstrap.md, docs/security.md class 3; audit 2026-11-28 N5):
// a secret in a referenced file, put by mistake where the server quotes what it was given, is named by its reference
// in the apply error the bootstrap logs and prints, whatever the server's message held.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { stringify } from 'yaml';
import { applyBootstrap, BootstrapApplyError } from '../../src/bootstrap/apply.ts';
import { parseBootstrap } from '../../src/bootstrap/load.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
let s: TestServer;
let ou: IsolatedOu;
let dir: string;
let mounts = 0;

beforeAll(async () => {
  s = await startTestServer();
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 1 });
  dir = mkdtempSync(join(tmpdir(), 'strongroom-bootstrap-redaction-'));
  writeFileSync(join(dir, 'bindpass'), `${ou.engine.password}\n`);
});
afterAll(async () => {
  await s?.close();
  await ou?.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** The apply error of `mount(ref)`, with `secret` in the file `ref` names. */
async function applyError(secret: string, mount: (ref: string, n: number) => Record<string, unknown>): Promise<string> {
  const secretFile = join(dir, `secret-${++mounts}`);
  writeFileSync(secretFile, `${secret}\n`);
  const loaded = parseBootstrap('f.yaml', stringify({ mounts: [mount(`\${file:${secretFile}}`, mounts)] }), { allowTokenIds: true });
  const err = await applyBootstrap(s.core, loaded).then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(BootstrapApplyError);
  return (err as Error).message;
}

const config = () => ({ url: facts.url, binddn: ou.engine.dn, bindpass: `\${file:${join(dir, 'bindpass')}}`, userdn: ou.dn, request_timeout: 5 });

describe('apply errors', () => {
  // Short and without digits, so the server's own cleaning (sent-values.ts, 8+ characters with a digit or 20+) leaves
  // them: only the bootstrap's redaction stands between them and the log.
  it.each([
    ['a password where a static role\'s username belongs', 'hunter', (ref: string, n: number) => ({ path: `redact-${n}`, type: 'ldap', config: config(), static_roles: [{ name: 'app', username: ref, rotation_period: '1h' }] })],
    ['a longer password where a static role\'s username belongs', 'correcthorse', (ref: string, n: number) => ({ path: `redact-${n}`, type: 'ldap', config: config(), static_roles: [{ name: 'app', username: ref, rotation_period: '1h' }] })],
  ])('"the message names the reference, never what it resolved to": %s', async (_name, secret, mount) => {
    const message = await applyError(secret, mount);
    expect(message).toContain('<the value of ${file:');
    expect(message.split(/[^\p{L}\p{N}]+/u)).not.toContain(secret);
  });

  it.each([
    ['a password where a library set\'s account belongs', 'stapled', (ref: string, n: number) => ({ path: `redact-${n}`, type: 'ldap', config: config(), library_sets: [{ name: 'pool', service_account_names: [ref], ttl: '1h' }] })],
    ['a password where the bind DN belongs (UPN form), the directory refusing the bind', 'Tr0ub4dor-3-bind-password', (ref: string, n: number) => ({ path: `redact-${n}`, type: 'ldap', config: { ...config(), binddn: ref, upndomain: 'strongroom.test' }, static_roles: [{ name: 'app', username: ou.users[0]!.name, rotation_period: '1h' }] })],
    ['a password where the search base belongs', 'Tr0ub4dor-3-bind-password', (ref: string, n: number) => ({ path: `redact-${n}`, type: 'ldap', config: { ...config(), userdn: ref }, static_roles: [{ name: 'app', username: ou.users[0]!.name, rotation_period: '1h' }] })],
  ])('"no apply error holds a resolved value": %s', async (_name, secret, mount) => {
    const message = await applyError(secret, mount);
    expect(message).not.toContain(secret);
  });
});
