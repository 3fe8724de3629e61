// Response wrapping (docs/wrapping.md): X-Vault-Wrap-TTL on any request, and sys/wrapping/{wrap,unwrap,lookup,rewrap},
// against a real server, slapd for the dynamic credential and a real file audit device.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { auditDir, auditHash, enableFile, entriesAt, readEntries } from '../support/audit.ts';
import { configure } from '../support/ldap-engine.ts';
import { createDatabase } from '../support/postgres.ts';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const clock = new FakeClock();
const audit = auditDir();
let s: TestServer;
let ou: IsolatedOu;

beforeAll(async () => {
  s = await startTestServer({ clock });
  await enableFile(s, 'file', audit.file());
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
  await configure(s, facts, ou);
});
afterAll(async () => {
  await s?.core.leases.idle();
  await s?.close();
  await ou?.cleanup();
  audit.cleanup();
});

const WRAP = (ttl: string) => ({ 'x-vault-wrap-ttl': ttl });

async function wrapData(data: Record<string, unknown>, ttl = '60s', token = 'root') {
  const r = await s.request('POST', 'sys/wrapping/wrap', { body: data, headers: WRAP(ttl), token });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.wrap_info as { token: string; accessor: string; ttl: number; creation_time: string; creation_path: string; wrapped_accessor?: string };
}

const unwrap = (token: string, as: string | null = 'root') => s.request('POST', 'sys/wrapping/unwrap', { body: as === token ? {} : { token }, token: as });

describe('X-Vault-Wrap-TTL on any request', () => {
  it('"wraps the response in a single-use token": the answer carries wrap_info and no data, lease or auth', async () => {
    const r = await s.request('POST', 'auth/token/create', { body: { policies: ['default'], ttl: '1h' }, headers: WRAP('2m') });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ request_id: '', data: null, auth: null, lease_id: '', lease_duration: 0 });
    expect(r.body.wrap_info).toMatchObject({ ttl: 120, creation_path: 'auth/token/create' });
    expect(r.body.wrap_info.token).toMatch(/^hvs\./);
    expect(Date.parse(r.body.wrap_info.creation_time)).toBe(clock.now());
  });

  it('"wrapping an auth response": wrapped_accessor names the wrapped token, which works after unwrapping', async () => {
    const r = await s.request('POST', 'auth/token/create', { body: { policies: ['default'], ttl: '1h' }, headers: WRAP('60s') });
    const info = r.body.wrap_info;
    const out = await unwrap(info.token, info.token);
    expect(out.status).toBe(200);
    expect(out.body.auth.accessor).toBe(info.wrapped_accessor);
    const self = await s.request('GET', 'auth/token/lookup-self', { token: out.body.auth.client_token });
    expect(self.status).toBe(200);
    expect(self.body.data.accessor).toBe(info.wrapped_accessor);
  });

  it('"a wrapped dynamic LDAP credential\'s lease is still registered": unwrapped, the account binds and its lease revokes it', async () => {
    const role = await s.request('POST', 'ldap/role/wrapped', {
      body: {
        creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: w\nuserPassword: {{.Password}}\n`,
        deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
        default_ttl: '1h',
      },
    });
    expect(role.status, JSON.stringify(role.body)).toBeLessThan(300);
    const r = await s.request('GET', 'ldap/creds/wrapped', { headers: WRAP('5m') });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.data).toBeNull();
    const out = (await unwrap(r.body.wrap_info.token)).body;
    const dn = `cn=${out.data.username},${ou.usersDn}`;
    expect(out.lease_id).toMatch(/^ldap\/creds\/wrapped\//);
    expect(await canBind(facts.url, dn, out.data.password)).toBe(true);
    expect((await s.request('POST', 'sys/leases/lookup', { body: { lease_id: out.lease_id } })).status).toBe(200);
    expect((await s.request('POST', 'sys/leases/revoke', { body: { lease_id: out.lease_id } })).status).toBe(204);
    await s.core.leases.idle();
    expect(await canBind(facts.url, dn, out.data.password)).toBe(false);
  });

  it('"a 400 naming the field past the bounds": negative, unparseable and past the maximum lease TTL', async () => {
    // Hostile spellings: negative, not a duration, an unknown unit, past the system maximum (32 days), past any duration,
    // two values (a repeated header arrives joined), a float in exponent form, an overlong text.
    for (const ttl of ['-5s', 'soon', '1x', `${32 * 86_400 + 1}`, '769h', '99999999h', '9'.repeat(400), '5m, 6m', '1e9', 'a'.repeat(100)]) {
      const r = await s.request('POST', 'sys/wrapping/wrap', { body: { a: 'b' }, headers: WRAP(ttl) });
      expect(r.status, ttl).toBe(400);
      expect(r.body.errors.join(' '), ttl).toContain('X-Vault-Wrap-TTL');
    }
  });

  it('"zero or no header is no wrapping", as in Vault: the answer comes back as usual', async () => {
    const r = await s.request('GET', 'sys/mounts/sys', { headers: WRAP('0') });
    expect(r.status).toBe(200);
    expect(r.body.wrap_info).toBeNull();
    expect(r.body.data.type).toBe('system');
  });

  it('"errors are not wrapped": a refused request gets its error, and no wrapping token is made', async () => {
    const r = await s.request('GET', 'ldap/creds/nosuch', { headers: WRAP('60s') });
    expect(r.status).toBe(404);
    expect(r.body.errors.length).toBeGreaterThan(0);
  });

  it('"a policy\'s max_wrapping_ttl holds": a longer wrap TTL is refused by the ACL', async () => {
    await s.request('PUT', 'sys/policies/acl/short-wraps', { body: { policy: 'path "sys/wrapping/wrap" { capabilities = ["update"]\n max_wrapping_ttl = "1m" }' } });
    const t = (await s.request('POST', 'auth/token/create', { body: { policies: ['short-wraps'], no_default_policy: true } })).body.auth.client_token;
    expect((await s.request('POST', 'sys/wrapping/wrap', { body: { a: 1 }, headers: WRAP('2m'), token: t })).status).toBe(403);
    expect((await s.request('POST', 'sys/wrapping/wrap', { body: { a: 1 }, headers: WRAP('30s'), token: t })).status).toBe(200);
  });
});

describe('sys/wrapping/wrap', () => {
  it('"requires response wrapping": without the header it is a 400', async () => {
    const r = await s.request('POST', 'sys/wrapping/wrap', { body: { a: 'b' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toMatch(/X-Vault-Wrap-TTL/);
  });

  it('"wraps the body as given": every key comes back, none warned about', async () => {
    const info = await wrapData({ password: 's3cret', nested: { n: 1 } });
    expect(info.creation_path).toBe('sys/wrapping/wrap');
    const out = await unwrap(info.token, info.token);
    expect(out.body.data).toEqual({ password: 's3cret', nested: { n: 1 } });
    expect(out.body.warnings).toBeNull();
  });
});

describe('sys/wrapping/unwrap', () => {
  it('"readable exactly once": a second unwrap is a 400, and the wrapping token no longer works', async () => {
    const info = await wrapData({ v: 1 });
    expect((await unwrap(info.token)).body.data).toEqual({ v: 1 });
    const again = await unwrap(info.token);
    expect(again.status).toBe(400);
    expect(again.body.errors).toEqual(['wrapping token is not valid or does not exist']);
    expect((await unwrap(info.token, info.token)).status).toBe(403);
  });

  it('"exactly once" under concurrency: of ten unwraps at once, one gets the answer', async () => {
    const info = await wrapData({ v: 'race' });
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => unwrap(info.token, i % 2 ? info.token : 'root')));
    expect(results.filter((r) => r.status === 200)).toHaveLength(1);
  });

  it('"by anyone holding the wrapping token": as the request\'s token, with no token of its own', async () => {
    const info = await wrapData({ v: 2 });
    const out = await unwrap(info.token, info.token);
    expect(out.status).toBe(200);
    expect(out.body.data).toEqual({ v: 2 });
  });

  it('"within its TTL": past it the token is refused, and its answer is gone from storage', async () => {
    const info = await wrapData({ v: 3 }, '10s');
    const salted = s.core.tokens.salt(info.token);
    expect(await s.core.tokens.wrapped.get(salted)).toBeDefined();
    await clock.advance(11_000);
    await s.core.leases.idle();
    expect((await unwrap(info.token)).status).toBe(400);
    expect(await s.core.tokens.wrapped.get(salted)).toBeUndefined();
  });

  it('"wrong token": a hostile table of tokens is refused with the same 400', async () => {
    const plain = (await s.request('POST', 'auth/token/create', { body: { ttl: '1h' } })).body.auth.client_token;
    for (const token of ['hvs.nosuchtoken', plain, 'root', ' ', `${plain}x`, 'a'.repeat(5000)]) {
      const r = await unwrap(token);
      expect(r.status, token.slice(0, 20)).toBe(400);
    }
  });

  it('"the wrapping token carries only the response-wrapping policy": it reads nothing else and cannot be renewed', async () => {
    const info = await wrapData({ v: 4 });
    for (const [method, path] of [['GET', 'sys/mounts'], ['GET', 'auth/token/lookup-self'], ['POST', 'auth/token/create'], ['POST', 'sys/wrapping/wrap']] as const) {
      expect((await s.request(method, path, { token: info.token, body: method === 'POST' ? {} : undefined })).status, path).toBe(403);
    }
    const renew = await s.request('POST', 'auth/token/renew', { body: { token: info.token } });
    expect(renew.status).toBe(400);
    const looked = await s.request('POST', 'auth/token/lookup', { body: { token: info.token } });
    expect(looked.body.data).toMatchObject({ policies: ['response-wrapping'], renewable: false, ttl: 60 });
    expect((await unwrap(info.token, info.token)).body.data).toEqual({ v: 4 });
  });

  it('"stored encrypted by the barrier": the raw store holds no byte of the answer', async () => {
    const info = await wrapData({ marker: 'plain-text-marker-4711' });
    const key = `${s.core.tokens.wrapped.prefix}${s.core.tokens.salt(info.token)}`;
    const raw = await s.core.options.storage.get(key);
    expect(raw).toBeDefined();
    expect(raw!.toString('latin1')).not.toContain('plain-text-marker-4711');
  });
});

describe('sys/wrapping/lookup', () => {
  it('"looks up without spending it": creation path, time and TTL, unauthenticated', async () => {
    const info = await wrapData({ v: 5 }, '90s');
    const r = await s.request('POST', 'sys/wrapping/lookup', { body: { token: info.token }, token: null });
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({ creation_path: 'sys/wrapping/wrap', creation_time: info.creation_time, creation_ttl: 90 });
    expect((await unwrap(info.token)).body.data).toEqual({ v: 5 });
    expect((await s.request('POST', 'sys/wrapping/lookup', { body: { token: info.token }, token: null })).status).toBe(400);
  });
});

describe('sys/wrapping/rewrap', () => {
  it('"same answer behind a new token with the same TTL": the old token stops working', async () => {
    const info = await wrapData({ v: 6 }, '45s');
    const r = await s.request('POST', 'sys/wrapping/rewrap', { body: { token: info.token } });
    expect(r.status).toBe(200);
    const next = r.body.wrap_info;
    expect(next).toMatchObject({ ttl: 45, creation_path: 'sys/wrapping/wrap' });
    expect(next.token).not.toBe(info.token);
    expect((await unwrap(info.token)).status).toBe(400);
    expect((await unwrap(next.token)).body.data).toEqual({ v: 6 });
  });
});

describe('audit', () => {
  it('"the wrapped request\'s entry records wrap_info with the token HMACed"; the unwrap is audited; no clear token anywhere', async () => {
    const info = await wrapData({ password: 'audit-secret' });
    await unwrap(info.token, info.token);
    const text = (await import('node:fs')).readFileSync(audit.file(), 'utf8');
    expect(text).not.toContain(info.token);
    expect(text).not.toContain('audit-secret');
    const entries = readEntries(audit.file());
    const wrapped = entriesAt(entries, 'sys/wrapping/wrap').filter((e) => e.type === 'response').at(-1)!;
    expect(wrapped.response!.wrap_info).toMatchObject({ token: await auditHash(s, 'file', info.token), ttl: 60, creation_path: 'sys/wrapping/wrap' });
    expect(wrapped.response!.data.password).toBe(await auditHash(s, 'file', 'audit-secret'));
    const unwrapped = entriesAt(entries, 'sys/wrapping/unwrap');
    expect(unwrapped.map((e) => e.type)).toContain('response');
  });

  it('"a wrapped auth response": the entry records the new token and wrapped_accessor HMACed, and neither token in the clear', async () => {
    const r = await s.request('POST', 'auth/token/create', { body: { policies: ['default'], ttl: '1h' }, headers: WRAP('60s') });
    const info = r.body.wrap_info;
    const inner = (await unwrap(info.token)).body.auth;
    const text = (await import('node:fs')).readFileSync(audit.file(), 'utf8');
    for (const secret of [info.token, inner.client_token, inner.accessor, info.accessor]) expect(text).not.toContain(secret);
    const entry = entriesAt(readEntries(audit.file()), 'auth/token/create').filter((e) => e.type === 'response').at(-1)!;
    expect(entry.response!.wrap_info).toMatchObject({
      token: await auditHash(s, 'file', info.token), accessor: await auditHash(s, 'file', info.accessor),
      wrapped_accessor: await auditHash(s, 'file', inner.accessor), creation_path: 'auth/token/create',
    });
    expect(entry.response!.auth.client_token).toBe(await auditHash(s, 'file', inner.client_token));
  });
});

describe('two nodes on one PostgreSQL store', () => {
  it('"exactly once" across nodes: a token wrapped on one node unwraps once, on either, and lookups agree', async () => {
    const db = await createDatabase(inject('postgres'));
    const key = randomBytes(32).toString('base64');
    const a = await startTestServer({ postgresUrl: db.url, unsealKey: key });
    const b = await startTestServer({ postgresUrl: db.url, unsealKey: key });
    try {
      const wrapped = await a.request('POST', 'sys/wrapping/wrap', { body: { v: 'shared' }, headers: WRAP('60s') });
      const token = wrapped.body.wrap_info.token as string;
      expect((await b.request('POST', 'sys/wrapping/lookup', { body: { token }, token: null })).body.data.creation_ttl).toBe(60);
      const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? a : b).request('POST', 'sys/wrapping/unwrap', { body: { token } })));
      expect(results.filter((r) => r.status === 200).map((r) => r.body.data)).toEqual([{ v: 'shared' }]);
      expect(results.filter((r) => r.status === 400)).toHaveLength(7);
    } finally {
      await a.close();
      await b.close();
      await db.drop();
    }
  });
});
