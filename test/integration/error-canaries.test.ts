// "An error names the field, never the value" (docs/security.md, class 3; audit 2026-11-28 N5): a canary value is
// sent in every field of every write endpoint the OpenAPI document lists, alone and all at once, and no error
// answer, no warning and no line of the audit log holds any canary in the clear. Two things the log keeps in the
// clear by design (docs/audit.md) are left out: object keys (sys/capabilities-self answers by the paths it was
// asked about) and a token's metadata. A canary an earlier write stored (ldap/config's bind DN, UPN domain, search
// base) must not come back in a later request's error either: the directory client names the configured field.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { applyBootstrap } from '../../src/bootstrap/apply.ts';
import { parseBootstrap } from '../../src/bootstrap/load.ts';
import { auditDir, auditHash, enableFile, readEntries } from '../support/audit.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const logs = auditDir();
const file = logs.file('canaries.log');
let s: TestServer;

/**
 * Writes that would end the run rather than answer (the caller's own token revoked, the keyring rotated under the
 * test), and the cloud engines, whose writes reach the cloud directory (the fuzz sweep drives them against the
 * emulator).
 */
const SKIPPED = [/^\/auth\/token\/revoke-self$/, /^\/sys\/rotate$/, /^\/(cloud|auth\/cloud)\//];
/** Bodies that get a request past its first checks, so the deeper ones (a DN's syntax, a policy's) see the canary. */
const BASE: Record<string, Record<string, unknown>> = {
  '/ldap/config': { url: 'ldap://127.0.0.1:1', binddn: 'cn=admin,dc=strongroom,dc=test', bindpass: 'not-a-canary' },
  '/ldap/static-role/{name}': { username: 'someone' },
  '/sys/policies/acl/{name}': { policy: 'path "a" { capabilities = ["read"] }' },
};

interface Schema { type?: string; properties?: Record<string, Schema> }
let n = 0;
const canaries: string[] = [];
/** A fresh canary: a plausible password, so every check that would quote a secret quotes this. */
function canary(): string {
  const c = `Tr0ub4dor-canary-${String(++n).padStart(4, '0')}`;
  canaries.push(c);
  return c;
}
function canaryFor(schema: Schema): unknown {
  if (schema.type === 'array') return [canary()];
  if (schema.type === 'object') return { key: canary() };
  if (schema.type === 'string' || schema.type === undefined) return canary();
  return undefined;
}

beforeAll(async () => {
  s = await startTestServer();
  await enableFile(s, 'file', file);
});
afterAll(async () => {
  await s?.close();
  logs.cleanup();
});

describe('every write endpoint', () => {
  it('"no error answer, warning or audit entry quotes a value the request sent": canaries in every field, alone and all at once', async () => {
    const doc = (await s.request('GET', 'sys/internal/specs/openapi')).body;
    const leaks: string[] = [];
    let sent = 0;
    for (const [route, ops] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
      if (SKIPPED.some((re) => re.test(route))) continue;
      const props: Record<string, Schema> = ops.post?.requestBody?.content?.['application/json']?.schema?.properties ?? {};
      if (!ops.post || Object.keys(props).length === 0) continue;
      const path = route.slice(1).replace(/\{[^}]+\}/g, 'canaried');
      const base = BASE[route] ?? {};
      const bodies = Object.entries(props).map(([name, schema]) => ({ ...base, [name]: canaryFor(schema) }));
      bodies.push({ ...base, ...Object.fromEntries(Object.entries(props).map(([name, schema]) => [name, canaryFor(schema)])) });
      for (const body of bodies) {
        const r = await s.request('POST', path, { body });
        sent++;
        const told = [...(r.status >= 400 ? r.body?.errors ?? [] : []), ...(r.body?.warnings ?? [])].join('\n');
        // This request's own values; one stored by an earlier request (a config's bind DN) may be named by the directory.
        const mine = JSON.stringify(body);
        const found = canaries.filter((c) => mine.includes(c) && told.includes(c));
        if (found.length) leaks.push(`POST ${path} ${r.status}: ${told}`);
      }
    }
    expect(sent).toBeGreaterThan(200);
    expect(leaks).toEqual([]);
    const lines = readFileSync(file, 'utf8').split('\n').filter((l) => !/"path":"sys\/capabilities/.test(l))
      .map((l) => l.replace(/"metadata":\{[^}]*\}/g, '"metadata":{}'));
    const around = (l: string) => canaries.filter((c) => l.includes(c)).map((c) => `${/"path":"[^"]*"/.exec(l)?.[0]}: …${l.slice(Math.max(0, l.indexOf(c) - 150), l.indexOf(c) + 40)}`);
    expect(lines.flatMap(around)).toEqual([]);
  });

  it('"the audit entry\'s error has any sent string replaced by its hash", whatever the message says', async () => {
    // A value sent in a path's field that reaches an error through a check this server does not write itself.
    const secret = `Tr0ub4dor-${Math.random().toString(36).slice(2)}`;
    const r = await s.request('POST', 'sys/mounts/canary-mount', { body: { type: secret } });
    expect(r.status).toBe(400);
    const entry = readEntries(file).filter((e) => e.request.path === 'sys/mounts/canary-mount').at(-1)!;
    expect(entry.error).toBeDefined();
    expect(entry.error).not.toContain(secret);
    expect(JSON.stringify(r.body)).not.toContain(secret);
    const hash = await auditHash(s, 'file', secret);
    expect(entry.request.data!.type).toBe(hash);
  });
});

describe('the bootstrap', () => {
  // The audit's reproduction: two references swapped by mistake put the bind password where a DN or a policy belongs.
  const password = 'Tr0ub4dor-3-bind-password';
  const apply = async (file: unknown) => {
    const loaded = parseBootstrap('f.yaml', stringify(file), { allowTokenIds: true, references: { env: { BINDPASS: password, BINDDN: 'cn=admin,dc=strongroom,dc=test' }, readFile: () => Buffer.alloc(0) } });
    const err = await applyBootstrap(s.core, loaded).then(() => undefined, (e: Error) => e);
    expect(err, 'the apply fails').toBeInstanceOf(Error);
    return err!.message;
  };

  it.each([
    ['a password where the bind DN belongs', { mounts: [{ path: 'ldap-swapped', type: 'ldap', config: { url: 'ldap://127.0.0.1:1', binddn: '${BINDPASS}', bindpass: '${BINDDN}' } }] }],
    ['a password where a policy belongs', { policies: { acl: [{ name: 'swapped', policy: '${BINDPASS}' }] } }],
  ])('"an apply error never holds a resolved value": %s', async (_name, file) => {
    const message = await apply(file);
    expect(message).not.toContain(password);
    expect(message).toMatch(/invalid value for field|line 1, column/);
  });
});

