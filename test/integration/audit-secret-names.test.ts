// A mount's audit_non_hmac_*_keys (tunable without sudo) may exempt only values that are not secret (docs/audit.md
// "What is hashed"): a token lookup's `id`, accessors, lease ids, a custom token id, credential names and keys an
// endpoint declares secret stay hashed whatever a tune says (audit 2026-11-28 N3).
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { exemptable } from '../../src/core/audit/entry.ts';
import { auditDir, enableFile } from '../support/audit.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const logs = auditDir();
const file = logs.file('secret-names.log');
let s: TestServer;

/** Every name a hostile tune lists, on every mount it reaches. */
const HOSTILE = ['id', 'accessor', 'lease_id', 'client_token', 'token', 'secret_id', 'private_key', 'password', 'client_secret',
  'keys', 'token_accessor', 'refresh_token', 'signing_key', 'db_password', 'input', 'display_name'];

beforeAll(async () => {
  s = await startTestServer();
  await enableFile(s, 'file', file);
  // A tuner without sudo, as in the audit's reproduction.
  expect((await s.request('PUT', 'sys/policies/acl/tuner', { body: { policy: 'path "sys/mounts/+/tune" { capabilities = ["read", "update"] }\npath "sys/mounts/auth/+/tune" { capabilities = ["read", "update"] }' } })).status).toBe(204);
  const tuner = (await s.request('POST', 'auth/token/create', { body: { policies: ['tuner'] } })).body.auth.client_token;
  for (const mount of ['auth/token', 'sys']) {
    const r = await s.request('POST', `sys/mounts/${mount}/tune`, { token: tuner, body: { audit_non_hmac_request_keys: HOSTILE, audit_non_hmac_response_keys: HOSTILE } });
    expect(r.status, mount).toBe(204);
  }
});
afterAll(async () => {
  await s?.close();
  logs.cleanup();
});

describe('audit_non_hmac_request_keys / audit_non_hmac_response_keys', () => {
  it('"a tune cannot put a token, an accessor, a lease id or a credential in the clear": none is in the log after every call that carries one', async () => {
    const issued = (await s.request('POST', 'auth/token/create', { body: { policies: ['default'], ttl: '1h' } })).body.auth;
    const custom = 'my-chosen-secret-token-id-0001';
    const created = await s.request('POST', 'auth/token/create', { body: { id: custom, policies: ['default'] } });
    expect(created.status).toBe(200);
    const calls = [
      await s.request('GET', 'auth/token/lookup-self', { token: issued.client_token }),
      await s.request('POST', 'auth/token/lookup', { body: { token: issued.client_token } }),
      await s.request('POST', 'auth/token/lookup-accessor', { body: { accessor: issued.accessor } }),
      await s.request('LIST', 'auth/token/accessors'),
      await s.request('LIST', 'sys/leases/lookup/auth/token/create/'),
      await s.request('POST', 'sys/audit-hash/file', { body: { input: 'an-audit-hash-input-secret' } }),
      await s.request('POST', 'auth/token/renew-self', { token: issued.client_token, body: {} }),
    ];
    for (const r of calls) expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
    const leaseIds = (calls[4].body.data.keys as string[]);
    expect(leaseIds.length).toBeGreaterThan(0);
    const log = readFileSync(file, 'utf8');
    const secrets = [issued.client_token, issued.accessor, custom, created.body.auth.accessor, 'an-audit-hash-input-secret', ...leaseIds];
    for (const secret of secrets) expect(log.includes(secret), secret).toBe(false);
    // What the tune may exempt still is: a display name is no secret.
    expect(log).toContain('"display_name":"token"');
  });
});

describe('which names a mount may exempt (entry.ts exemptable)', () => {
  it.each([
    'id', 'accessor', 'lease_id', 'client_token', 'token', 'secret_id', 'private_key', 'key', 'password', 'last_password', 'bindpass',
    'client_secret', 'secret', 'jwt', 'assertion', 'input', 'token_accessor', 'client_token_accessor', 'refresh_token', 'signing_key', 'db_password', 'user_passwd',
  ])('"a credential name is never exempt": %s', (name) => {
    expect(exemptable(name, undefined, undefined)).toBe(false);
  });

  it('"a field declared secret, and a response key the endpoint declares secret, are never exempt"; other names are', () => {
    expect(exemptable('value', { value: { kind: 'string', description: '', secret: true } as never }, undefined)).toBe(false);
    expect(exemptable('keys', undefined, ['keys'])).toBe(false);
    for (const name of ['keys', 'display_name', 'policies', 'username', 'ttl', 'value']) expect(exemptable(name, undefined, undefined), name).toBe(true);
  });
});
