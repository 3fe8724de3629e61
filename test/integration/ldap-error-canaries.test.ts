// "An error names the field, never the value" for what a config write stored (docs/security.md, class 3; audit
// 2026-11-28 N5): a canary stored in the LDAP config's bind DN, UPN domain, search base or user attribute never comes
// back in the error of a later request that fails against the real directory, nor in that request's audit entry.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { auditDir, enableFile } from '../support/audit.ts';
import { createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const logs = auditDir();
const file = logs.file('ldap-canaries.log');
let s: TestServer;
let ou: IsolatedOu;
let mounts = 0;

beforeAll(async () => {
  s = await startTestServer();
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 1 });
  await enableFile(s, 'file', file);
});
afterAll(async () => {
  await s?.close();
  await ou?.cleanup();
  logs.cleanup();
});

/** A mount configured with `config`, then the requests that reach the directory through it; every error text told. */
async function failures(config: Record<string, unknown>): Promise<{ told: string[]; mount: string }> {
  const mount = `ldap-canary-${++mounts}`;
  expect((await s.request('POST', `sys/mounts/${mount}`, { body: { type: 'ldap' } })).status).toBe(204);
  const write = await s.request('POST', `${mount}/config`, { body: { url: facts.url, request_timeout: 5, ...config } });
  expect(write.status, JSON.stringify(write.body)).toBe(204);
  const told: string[] = [];
  for (const [path, body] of [
    ['static-role/app', { username: ou.users[0]!.name, rotation_period: '1h' }],
    ['static-role/by-dn', { dn: ou.users[0]!.dn, username: ou.users[0]!.name, rotation_period: '1h' }],
    ['library/pool', { service_account_names: [ou.serviceAccounts[0]!.name], ttl: '1h' }],
    ['rotate-root', {}],
  ] as const) {
    const r = await s.request('POST', `${mount}/${path}`, { body });
    if (r.status >= 400) told.push(`POST ${path} ${r.status}: ${(r.body?.errors ?? []).join('; ')}`);
  }
  return { told, mount };
}

describe('the LDAP config stored by an earlier write', () => {
  const canary = 'Tr0ub4dor-stored-canary';
  it.each([
    ['a bind DN (UPN form) the directory does not know', { binddn: canary, upndomain: 'strongroom.test', bindpass: 'Wr0ng-password-1', userdn: ou?.dn }],
    ['a UPN domain the directory does not know', { binddn: 'engine', upndomain: `${canary}.test`, bindpass: 'Wr0ng-password-1' }],
    ['a bind DN that is a well-formed DN with no entry', { binddn: `cn=${canary},dc=strongroom,dc=test`, bindpass: 'Wr0ng-password-1' }],
    ['a search base with no entry', { binddn: () => ou.engine.dn, bindpass: () => ou.engine.password, userdn: `ou=${canary},dc=strongroom,dc=test` }],
    ['a user attribute the schema does not define', { binddn: () => ou.engine.dn, bindpass: () => ou.engine.password, userdn: () => ou.dn, userattr: `x${canary.replace(/[^A-Za-z0-9]/g, '')}` }],
  ])('"a later request\'s error names the configured field, never its value": %s', async (_name, config) => {
    const resolved = Object.fromEntries(Object.entries(config).map(([k, v]) => [k, typeof v === 'function' ? v() : v]));
    const hidden = Object.values(resolved).filter((v): v is string => typeof v === 'string' && v.toLowerCase().includes(canary.toLowerCase().replace(/[^a-z0-9]/g, '').slice(0, 6)));
    const { told, mount } = await failures(resolved);
    expect(told.length, 'at least one request fails against the directory').toBeGreaterThan(0);
    expect(told.join('\n')).toMatch(/the configured (binddn|upndomain|userdn|userattr)|LDAP result code/);
    for (const value of hidden) expect(told.join('\n').toLowerCase(), told.join('\n')).not.toContain(value.toLowerCase());
    const entries = readFileSync(file, 'utf8').split('\n').filter((l) => l.includes(`"path":"${mount}/`) && !l.includes(`"path":"${mount}/config"`));
    for (const value of hidden) expect(entries.filter((l) => l.toLowerCase().includes(value.toLowerCase()))).toEqual([]);
  });

  it('"a connection error names the url": cannot connect to <url>: <reason>, without the url\'s user information', async () => {
    const { told } = await failures({ url: 'ldap://someone:Tr0ub4dor-in-url@127.0.0.1:1', binddn: ou.engine.dn, bindpass: 'Wr0ng-password-1', request_timeout: 2 });
    expect(told.join('\n')).toContain('cannot connect to ldap://127.0.0.1:1: connection refused');
    expect(told.join('\n')).not.toContain('Tr0ub4dor-in-url');
  });
});

describe('a short bind password', () => {
  it.each(['t', 'e', 'rd', 'dc'])('"a secret is never told, and a short one never shreds the text around it": bindpass %j', async (bindpass) => {
    const { told } = await failures({ binddn: ou.engine.dn, bindpass, userdn: ou.dn });
    const text = told.join('\n');
    expect(text).toContain('failed to bind as the configured binddn with current password');
    expect(text).toContain('invalidCredentials');
    // Where it stands alone it is hidden; inside a word it is left (it hides nothing there and the word stays readable).
    expect(text).not.toMatch(/[\p{L}\p{N}]\[redacted\]|\[redacted\][\p{L}\p{N}]/u);
    expect(text.split(/[^\p{L}\p{N}]+/u)).not.toContain(bindpass);
  });
});
