// Security audit 2026-11, finding 8: one request cannot stall the server. Dynamic-role templates render
// synchronously on the event loop, at role write (sample data) and on every creds request; a template
// that would loop, allocate or nest without bound must end in a 400 naming its field while the server
// keeps answering everyone else.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { issueToken } from '../../src/core/token-issue.ts';
import { createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';
import { configure } from '../support/ldap-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
let server: TestServer;
let ou: IsolatedOu;

/**
 * A bound that only a stalled event loop can reach: a refused template costs tens of milliseconds at
 * most, while before the limits `{{range 300000000}}` alone held the loop for seconds.
 */
const HEALTH_BOUND_MS = 5_000;

beforeAll(async () => {
  server = await startTestServer({ listen: true });
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
  await configure(server, facts, ou);
});
afterAll(async () => {
  await server.core.leases.idle();
  await ou.cleanup();
  await server.close();
});

const userDn = () => `cn={{.Username}},${ou.usersDn}`;
const validRole = () => ({
  creation_ldif: `dn: ${userDn()}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: {{.DisplayName}}\nuserPassword: {{.Password}}\n`,
  deletion_ldif: `dn: ${userDn()}\nchangetype: delete\n`,
  rollback_ldif: `dn: ${userDn()}\nchangetype: delete\n`,
});

interface Answer {
  status: number;
  body: any;
  ms: number;
}

/** Over a real socket, so requests really share the server's event loop. */
async function call(method: string, path: string, opts: { body?: unknown; token?: string } = {}): Promise<Answer> {
  const start = performance.now();
  const res = await fetch(`${server.url}/v1/${path}`, {
    method,
    headers: { 'x-service-token': opts.token ?? 'root', ...(opts.body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    signal: AbortSignal.timeout(HEALTH_BOUND_MS * 4),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined, ms: performance.now() - start };
}

/** Sends `request` and, in the same tick, a health check; both must be answered. */
async function alongsideHealth(request: Promise<Answer>): Promise<Answer> {
  const [answer, health] = await Promise.all([request, call('GET', 'sys/health')]);
  expect(health.status).toBe(200);
  expect(health.ms).toBeLessThan(HEALTH_BOUND_MS);
  return answer;
}

const deep = (open: string, close: string, n: number, inner = ''): string => open.repeat(n) + inner + close.repeat(n);

describe('role write: a template past its limits is a 400 naming the field; the server keeps answering', () => {
  const cases: Array<[string, string, string, RegExp]> = [
    ['creation_ldif', '{{range 300000000}}', '{{range 300000000}}{{end}}', /evaluation exceeded the limit of 100000 steps/],
    ['deletion_ldif', 'nested ranges', '{{range 100000}}{{range 100000}}{{end}}{{end}}', /evaluation exceeded the limit of 100000 steps/],
    ['rollback_ldif', 'random 100000000', 'dn: cn={{random 100000000}},dc=x\nchangetype: delete\n', /random: length exceeded the limit of 1024/],
    ['creation_ldif', 'printf "%1000000000d"', 'dn: cn={{printf "%1000000000d" 1}},dc=x\nchangetype: delete\n', /printf: width exceeded the limit of 1024/],
    ['deletion_ldif', 'a range printing a long string', `{{range 300000000}}${'x'.repeat(64)}{{end}}`, /output exceeded the limit of 32768 characters/],
    ['rollback_ldif', '{{if}} 1,000 deep', deep('{{if 1}}', '{{end}}', 1_000), /nesting exceeded the limit of 100 levels/],
    ['creation_ldif', 'parentheses 1,000 deep', `{{${deep('(', ')', 1_000, '1')}}}`, /nesting exceeded the limit of 100 levels/],
    ['deletion_ldif', 'a text over 16 KiB', `dn: cn=x,dc=x\nchangetype: delete\n#${'x'.repeat(16 * 1024)}\n`, /template text exceeded the limit of 16384 characters/],
    ['username_template', '{{range 300000000}}', 'v_{{range 300000000}}{{end}}', /evaluation exceeded the limit of 100000 steps/],
    ['username_template', 'random 100000000', 'v_{{random 100000000}}', /random: length exceeded the limit of 1024/],
    ['username_template', 'parentheses 200 deep', `v_{{${deep('(', ')', 200, '1')}}}`, /nesting exceeded the limit of 100 levels/],
    ['username_template', 'a text over 1 KiB', `v_{{/*${'x'.repeat(1024)}*/}}`, /template text exceeded the limit of 1024 characters/],
  ];
  let roles = 0;
  it.each(cases)('%s: %s', async (field, _bomb, text, reason) => {
    const name = `bomb-${roles++}`;
    const write = await alongsideHealth(call('POST', `ldap/role/${name}`, { body: { ...validRole(), [field]: text } }));
    expect(write.status, JSON.stringify(write.body)).toBe(400);
    expect(write.body.errors).toHaveLength(1);
    expect(write.body.errors[0]).toMatch(new RegExp(`^invalid value for field "${field}": template limit reached at line \\d+, column \\d+: `));
    expect(write.body.errors[0]).toMatch(reason);
    expect((await call('GET', `ldap/role/${name}`)).status).toBe(404);
  });
});

describe('creds: a role valid at write whose template real data pushes past a limit', () => {
  // len³ iterations: 3,375 for the sample "testdisplayname", a million for a 100-character display name.
  const cube = '{{range len .DisplayName}}{{range len $.DisplayName}}{{range len $.DisplayName}}{{end}}{{end}}{{end}}';

  it('is a 400 naming the role\'s field, without the data, and creates nothing; the server keeps answering', async () => {
    const role = validRole();
    const write = await call('POST', 'ldap/role/cube', { body: { ...role, creation_ldif: role.creation_ldif + cube, username_template: 'v_cube' } });
    expect(write.status, JSON.stringify(write.body)).toBeLessThan(300);
    const created = `cn=v_cube,${ou.usersDn}`;

    const ok = await call('GET', 'ldap/creds/cube');
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect((await call('POST', 'sys/leases/revoke', { body: { lease_id: ok.body.lease_id } })).status).toBe(204);
    await server.core.leases.idle();
    expect(await readEntry(facts, created)).toBeUndefined();

    const displayName = `long-${'n'.repeat(95)}`;
    const { token } = await issueToken(server.core, { policies: ['root'], path: 'auth/test/login', displayName, ttl: 600, parent: '', renewable: false });
    const refused = await alongsideHealth(call('GET', 'ldap/creds/cube', { token }));
    expect(refused.status, JSON.stringify(refused.body)).toBe(400);
    expect(refused.body.errors[0]).toMatch(/^invalid value for field "creation_ldif": template limit reached at line \d+, column \d+: evaluation exceeded the limit of 100000 steps$/);
    expect(refused.body.errors[0]).not.toContain(displayName);
    expect(await readEntry(facts, created)).toBeUndefined();
  });
});
