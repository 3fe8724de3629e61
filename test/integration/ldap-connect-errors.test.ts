// LDAP connection errors name the URL and the reason ("cannot connect to <url>: <reason>"), never a password failure:
// the provider against dead and hostile endpoints, and the engine's answer through a server.
import { createServer, type Server } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { LdapClient, LdapConnectionConfig } from '../../src/providers/ldap/client.ts';
import { LdapProviderError, connectFailure } from '../../src/providers/ldap/errors.ts';
import { createLdapClient } from '../../src/providers/ldap/ldapts-client.ts';
import { freePort } from '../support/ports.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const clients: LdapClient[] = [];
const client = (overrides: Partial<LdapConnectionConfig>): LdapClient => {
  const c = createLdapClient({ url: facts.url, binddn: facts.engineDn, bindpass: facts.enginePassword, request_timeout: 3, ...overrides });
  clients.push(c);
  return c;
};
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
});

async function failure(c: LdapClient): Promise<LdapProviderError> {
  const err = await c.checkBind().then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(LdapProviderError);
  return err as LdapProviderError;
}

/** A TCP server that accepts and at once hangs up: a port that is open but is no directory. */
async function hangUp(): Promise<{ url: string; close: () => void }> {
  const srv: Server = createServer((socket) => socket.destroy());
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return { url: `ldap://127.0.0.1:${(srv.address() as { port: number }).port}`, close: () => srv.close() };
}

describe('the LDAP provider: "cannot connect to <url>: <reason>", not a password failure', () => {
  it('a refused connection says so, naming the URL, and never mentions a bind or the password', async () => {
    const url = `ldap://127.0.0.1:${await freePort()}`;
    const err = await failure(client({ url }));
    expect(err.kind).toBe('connection');
    expect(err.status).toBe(502);
    expect(err.message).toBe(`bind check: cannot connect to ${url}: connection refused`);
    expect(err.message).not.toMatch(/failed to bind|password/i);
  });

  it('a port that hangs up is a connection failure too', async () => {
    const srv = await hangUp();
    try {
      const err = await failure(client({ url: srv.url }));
      expect(err.kind).toBe('connection');
      expect(err.message).toMatch(new RegExp(`^bind check: cannot connect to ${srv.url}: `));
      expect(err.message).not.toMatch(/password/i);
    } finally {
      srv.close();
    }
  });

  it('with several URLs, each is named with its own reason', async () => {
    const [a, b] = [`ldap://127.0.0.1:${await freePort()}`, `ldap://127.0.0.1:${await freePort()}`];
    const err = await failure(client({ url: `${a},${b}` }));
    expect(err.message).toBe(`bind check: cannot connect to ${a}: connection refused; cannot connect to ${b}: connection refused`);
  });

  it('a wrong password, where the directory answered, is still a bind failure', async () => {
    const err = await failure(client({ bindpass: 'certainly-not-it' }));
    expect(err.message).toMatch(/^bind check: failed to bind as the configured binddn with current password: LDAP result code 49/);
    expect(err.message).not.toContain('certainly-not-it');
  });

  it.each([
    ['ENOTFOUND', 'getaddrinfo ENOTFOUND ldap.invalid', 'host not found'],
    ['EAI_AGAIN', 'getaddrinfo EAI_AGAIN ldap.example', 'host name lookup failed (temporary)'],
    ['ETIMEDOUT', 'connect ETIMEDOUT 10.0.0.1:389', 'timed out'],
    ['ECONNRESET', 'read ECONNRESET', 'connection reset'],
  ])('%s reads "%s" as "%s"', (code, message, reason) => {
    expect(connectFailure('ldap://h:389', Object.assign(new Error(message), { code }), [])).toBe(`cannot connect to ldap://h:389: ${reason}`);
  });

  it('a reason without a known code keeps its text, scrubbed of the passwords', () => {
    expect(connectFailure('ldaps://h', new Error('TLS handshake failed near s3cret'), ['s3cret'])).toBe('cannot connect to ldaps://h: TLS handshake failed near [redacted]');
  });
});

describe('the LDAP engine through the server', () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startTestServer();
  });
  afterAll(async () => {
    await s?.close();
  });

  it('a credential read with the directory down is a 502 "cannot connect to <url>: connection refused"', async () => {
    const url = `ldap://127.0.0.1:${await freePort()}`;
    const cfg = await s.request('POST', 'ldap/config', { body: { url, binddn: facts.engineDn, bindpass: facts.enginePassword, request_timeout: 3 } });
    expect(cfg.status, JSON.stringify(cfg.body)).toBe(204);
    const role = await s.request('POST', 'ldap/role/down', { body: { creation_ldif: 'dn: cn={{.Username}},dc=example,dc=org\nobjectClass: person\ncn: {{.Username}}\nsn: x\n', deletion_ldif: 'dn: cn={{.Username}},dc=example,dc=org\nchangetype: delete\n' } });
    expect(role.status, JSON.stringify(role.body)).toBeLessThan(300);
    const r = await s.request('GET', 'ldap/creds/down');
    expect(r.status).toBe(502);
    expect(r.body.errors.join('; ')).toContain(`cannot connect to ${url}: connection refused`);
    expect(r.body.errors.join('; ')).not.toMatch(/password/i);
  });
});
