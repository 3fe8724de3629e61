import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import type { LdifRecord } from '../../src/lib/ldif/types.ts';
import type { LdapClient, LdapConnectionConfig } from '../../src/providers/ldap/client.ts';
import { escapeDnValue } from '../../src/providers/ldap/dn.ts';
import { LdapProviderError } from '../../src/providers/ldap/errors.ts';
import { createLdapClient } from '../../src/providers/ldap/ldapts-client.ts';
import { canBind, createIsolatedOu, readEntry, slapdFactsFromEnv, type IsolatedOu } from '../support/slapd.ts';
import { freePort } from '../support/ports.ts';

const facts = inject('slapd');

const clients: LdapClient[] = [];
function client(overrides: Partial<LdapConnectionConfig> = {}): LdapClient {
  const c = createLdapClient({
    url: facts.url,
    binddn: facts.engineDn,
    bindpass: facts.enginePassword,
    request_timeout: 5,
    ...overrides,
  });
  clients.push(c);
  return c;
}

async function rejection(p: Promise<unknown>): Promise<LdapProviderError> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(LdapProviderError);
  return err as LdapProviderError;
}


let ou: IsolatedOu;
beforeEach(async () => {
  ou = await createIsolatedOu(facts);
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.close()));
  await ou.cleanup();
});

describe('harness', () => {
  it('hands the same facts to workers through inject and the environment', () => {
    expect(slapdFactsFromEnv()).toEqual(facts);
    expect(facts.startMs).toBeGreaterThan(0);
  });

  it('isolated OU accounts bind; ordinary users cannot manage others; cleanup removes the subtree', async () => {
    const extra = await createIsolatedOu(facts, { users: ['solo'], serviceAccounts: 0 });
    expect(extra.dn).not.toBe(ou.dn);
    expect(await canBind(facts.url, extra.users[0]!.dn, extra.users[0]!.password)).toBe(true);
    expect(await canBind(facts.url, extra.engine.dn, extra.engine.password)).toBe(true);
    const asUser = client({ binddn: extra.users[0]!.dn, bindpass: extra.users[0]!.password });
    const denied = await rejection(asUser.setPassword(ou.users[0]!.dn, 'Not-Allowed-1'));
    expect(denied.ldapCode).toBe(50);
    expect(denied.kind).toBe('upstream');
    // A user may change its own password.
    await asUser.setPassword(extra.users[0]!.dn, 'Own-Change-1');
    expect(await canBind(facts.url, extra.users[0]!.dn, 'Own-Change-1')).toBe(true);
    await extra.cleanup();
    expect(await readEntry(facts, extra.dn)).toBeUndefined();
    expect((await readEntry(facts, facts.enginesGroupDn))!.member).not.toContain(extra.engine.dn);
  });
});

describe('bind and connection', () => {
  it('binds with the engine account (not the rootdn)', async () => {
    expect(facts.engineDn).not.toBe(facts.rootDn);
    await expect(client().checkBind()).resolves.toEqual({ url: facts.url, usedFallback: false });
  });

  it('a wrong bind password is an upstream (502) error without the password in it', async () => {
    const err = await rejection(client({ bindpass: 'wrong-Secret-123' }).checkBind());
    expect(err.kind).toBe('upstream');
    expect(err.status).toBe(502);
    expect(err.ldapCode).toBe(49);
    expect(err.message).not.toContain('wrong-Secret-123');
    expect(err.message).toContain('failed to bind');
  });

  it('falls back to the previous bind password and says so', async () => {
    const c = client({ bindpass: 'not-it-anymore', fallback_bindpass: ['also-wrong', facts.enginePassword] });
    await expect(c.checkBind()).resolves.toMatchObject({ usedFallback: true });
    // The shared session binds the same way, so ordinary operations work too.
    await expect(c.findByDn(facts.engineDn)).resolves.toMatchObject({ dn: facts.engineDn });
    const err = await rejection(client({ bindpass: 'x1', fallback_bindpass: ['x2'] }).checkBind());
    expect(err.message).toContain('current and prior passwords');
    expect(err.message).not.toMatch(/x1|x2/);
  });

  it('tries the URL list in order when the first is dead', async () => {
    const dead = `ldap://127.0.0.1:${await freePort()}`;
    const c = client({ url: `${dead}, ${facts.url}` });
    await expect(c.checkBind()).resolves.toMatchObject({ url: facts.url });
    await expect(c.findByDn(ou.users[0]!.dn)).resolves.toMatchObject({ dn: ou.users[0]!.dn });
  });

  it('moves on when a server accepts but never answers (request_timeout)', async () => {
    const silent: Server = createServer(() => undefined);
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const port = (silent.address() as { port: number }).port;
      const started = Date.now();
      const c = client({ url: `ldap://127.0.0.1:${port},${facts.url}`, request_timeout: 10, connection_timeout: 1 });
      await expect(c.checkBind()).resolves.toMatchObject({ url: facts.url });
      expect(Date.now() - started).toBeLessThan(5000);
    } finally {
      silent.close();
    }
  });

  it('reports every URL when none answers, as a connection (502) error', async () => {
    const [a, b] = [await freePort(), await freePort()];
    const err = await rejection(client({ url: `ldap://127.0.0.1:${a},ldap://127.0.0.1:${b}` }).checkBind());
    expect(err.kind).toBe('connection');
    expect(err.status).toBe(502);
    expect(err.message).toContain(`127.0.0.1:${a}`);
    expect(err.message).toContain(`127.0.0.1:${b}`);
  });

  it('refuses a non-LDAP scheme as input (400)', () => {
    expect(() => client({ url: 'http://127.0.0.1' })).toThrow(/invalid LDAP scheme/);
  });
});

describe('TLS', () => {
  it('LDAPS verifies the server against the configured CA', async () => {
    await expect(client({ url: facts.ldapsUrl, certificate: facts.caCertPem }).checkBind()).resolves.toMatchObject({ url: facts.ldapsUrl });
  });

  it('LDAPS without the CA fails verification unless insecure_tls', async () => {
    const err = await rejection(client({ url: facts.ldapsUrl }).checkBind());
    expect(err.kind).toBe('connection');
    expect(err.message).toMatch(/certificate|self[- ]signed|verify/i);
    await expect(client({ url: facts.ldapsUrl, insecure_tls: true }).checkBind()).resolves.toBeTruthy();
    // insecure_tls must be exactly true to turn verification off.
    await rejection(client({ url: facts.ldapsUrl, insecure_tls: false }).checkBind());
  });

  it('StartTLS on the plain port, verified against the CA', async () => {
    const c = client({ starttls: true, certificate: facts.caCertPem });
    await expect(c.checkBind()).resolves.toMatchObject({ url: facts.url });
    await expect(c.findByDn(ou.users[0]!.dn)).resolves.toMatchObject({ dn: ou.users[0]!.dn });
  });

  it('StartTLS without the CA fails; with the CA and a client certificate works', async () => {
    const err = await rejection(client({ starttls: true }).checkBind());
    expect(err.kind).toBe('connection');
    await expect(client({
      starttls: true, certificate: facts.caCertPem, client_tls_cert: facts.clientCertPem, client_tls_key: facts.clientKeyPem,
      tls_min_version: 'tls12', tls_max_version: 'tls13',
    }).checkBind()).resolves.toBeTruthy();
    await expect(client({ url: facts.ldapsUrl, certificate: facts.caCertPem, client_tls_cert: facts.clientCertPem, client_tls_key: facts.clientKeyPem })
      .checkBind()).resolves.toBeTruthy();
  });

  it('a client certificate without its key is an input error', () => {
    expect(() => client({ url: facts.ldapsUrl, client_tls_cert: facts.clientCertPem })).toThrow(
      expect.objectContaining({ kind: 'input', status: 400, message: expect.stringContaining('client_tls_key') }),
    );
  });
});

describe('passwords', () => {
  it('setPassword (openldap) makes the new password bind and the old one fail', async () => {
    const user = ou.users[1]!;
    const c = client();
    expect(await canBind(facts.url, user.dn, user.password)).toBe(true);
    await c.setPassword(user.dn, 'N3w-password-1');
    expect(await canBind(facts.url, user.dn, 'N3w-password-1')).toBe(true);
    expect(await canBind(facts.url, user.dn, user.password)).toBe(false);
    expect(await c.authenticate(user.dn, 'N3w-password-1')).toBe(true);
    expect(await c.authenticate(user.dn, user.password)).toBe(false);
    expect(await c.authenticate(user.dn, '')).toBe(false);
  });

  it('setPassword on a missing entry is an input error that does not leak the password', async () => {
    const err = await rejection(client().setPassword(`cn=nobody,${ou.usersDn}`, 'Leaky-Pass-9'));
    expect(err.kind).toBe('input');
    expect(err.ldapCode).toBe(32);
    expect(err.message).not.toContain('Leaky-Pass-9');
  });

  it('rotate-root style: the engine changes its own password, then binds with new or falls back to old', async () => {
    const cfg = { binddn: ou.engine.dn, bindpass: ou.engine.password };
    const c = client(cfg);
    const self = await c.findBindEntry();
    expect(self.dn).toBe(ou.engine.dn);
    await c.setPassword(self.dn, 'Rotated-Root-1');
    expect(await canBind(facts.url, ou.engine.dn, ou.engine.password)).toBe(false);
    await expect(client({ ...cfg, bindpass: 'Rotated-Root-1' }).checkBind()).resolves.toMatchObject({ usedFallback: false });
    // A replica that has not seen the change yet: the new password fails there, the old one is the fallback.
    await expect(client({ ...cfg, bindpass: 'not-replicated', fallback_bindpass: ['Rotated-Root-1'] }).checkBind())
      .resolves.toMatchObject({ usedFallback: true });
    // The rotated engine still manages the tree.
    const after = client({ ...cfg, bindpass: 'Rotated-Root-1' });
    await after.setPassword(ou.users[0]!.dn, 'Managed-After-1');
    expect(await canBind(facts.url, ou.users[0]!.dn, 'Managed-After-1')).toBe(true);
  });
});

describe('search', () => {
  it('finds by userattr under userdn, case-insensitive attribute name', async () => {
    const c = client({ userdn: ou.usersDn, userattr: 'CN' });
    await expect(c.findByUsername('user2')).resolves.toMatchObject({ dn: ou.users[2]!.dn });
    await expect(c.findByUsername('USER2')).resolves.toMatchObject({ dn: ou.users[2]!.dn });
    await expect(client({ userdn: ou.usersDn, userattr: 'cn', case_sensitive_names: true }).findByUsername('USER2')).resolves.toBeUndefined();
    await expect(client({ userdn: ou.usersDn, userattr: 'uid' }).findByUsername('user1')).resolves.toMatchObject({ dn: ou.users[1]!.dn });
    await expect(c.findByUsername('svc0')).resolves.toBeUndefined(); // service accounts live elsewhere
  });

  it('filter injection attempts match nothing instead of everything', async () => {
    const c = client({ userdn: ou.dn, userattr: 'cn' });
    for (const attempt of ['*', '*)(cn=*', 'user0)(|(cn=*', 'user*', '\\2a', 'user0)(objectClass=*']) {
      await expect(c.findByUsername(attempt)).resolves.toBeUndefined();
    }
    // Without escaping, "*" would have matched several entries and thrown; with it nothing leaks.
    const err = await rejection(c.resolveAccount({ username: '*' }));
    expect(err.kind).toBe('input');
    expect(() => client({ userattr: 'cn=*)(x' })).toThrow(/not a valid attribute name/);
  });

  it('handles DNs containing "," "+" and "\\" as DNs', async () => {
    const c = client({ userdn: ou.usersDn, userattr: 'cn' });
    const names = ['Smith, John', 'a+b', 'back\\slash', 'paren (x)*'];
    for (const name of names) {
      const dn = `cn=${escapeDnValue(name)},${ou.usersDn}`;
      await c.add(dn, [
        { name: 'objectClass', values: ['inetOrgPerson'] }, { name: 'cn', values: [name] }, { name: 'sn', values: ['x'] },
        { name: 'userPassword', values: [`pw-${names.indexOf(name)}-Ok`] },
      ]);
      const found = await c.findByUsername(name);
      expect(found?.attributes.cn).toContain(name);
      expect(await c.findByDn(found!.dn)).toBeTruthy();
      await c.setPassword(found!.dn, `new-${names.indexOf(name)}-Ok`);
      expect(await canBind(facts.url, found!.dn, `new-${names.indexOf(name)}-Ok`)).toBe(true);
    }
    // Only the one entry changed: other users keep their passwords.
    for (const u of ou.users) expect(await canBind(facts.url, u.dn, u.password)).toBe(true);
    // An explicit DN is read at its own location, never re-resolved, and wildcards in it are literal.
    await expect(c.findByDn(`cn=*,${ou.usersDn}`)).resolves.toBeUndefined();
    const err = await rejection(c.resolveAccount({ dn: `cn=Smith,${ou.usersDn}`, username: 'Smith, John' }));
    expect(err.status).toBe(400);
    await expect(c.resolveAccount({ dn: ou.users[0]!.dn, username: 'user1' })).resolves.toMatchObject({ dn: ou.users[0]!.dn });
    const bad = await rejection(c.findByDn('not a dn'));
    expect(bad.kind).toBe('input');
  });

  it('several matches are an input error', async () => {
    const c = client({ userdn: ou.dn, userattr: 'sn' });
    await c.add(`cn=twin,${ou.serviceAccountsDn}`, [
      { name: 'objectClass', values: ['inetOrgPerson'] }, { name: 'cn', values: ['twin'] }, { name: 'sn', values: ['user0'] },
    ]);
    const err = await rejection(c.findByUsername('user0'));
    expect(err.kind).toBe('input');
    expect(err.message).toMatch(/found 2/);
  });
});

function add(dn: string, attrs: Record<string, string[]>, line = 1): LdifRecord {
  return { changetype: 'add', dn, attributes: Object.entries(attrs).map(([name, values]) => ({ name, values })), line };
}

describe('LDIF execution', () => {
  it('creates a user and adds it to a group, then deletes both changes', async () => {
    const c = client();
    const dn = `cn=v_dyn,${ou.usersDn}`;
    const creation: LdifRecord[] = [
      add(dn, { objectClass: ['inetOrgPerson'], cn: ['v_dyn'], sn: ['v_dyn'], userPassword: ['Dyn-Pass-1'] }),
      { changetype: 'modify', dn: ou.groupDn, changes: [{ operation: 'add', attribute: { name: 'member', values: [dn] } }], line: 8 },
    ];
    const created = await c.executeLdif(creation, 'stop-at-first-error');
    expect(created.ok).toBe(true);
    expect(created.results.map((r) => r.status)).toEqual(['ok', 'ok']);
    expect(await canBind(facts.url, dn, 'Dyn-Pass-1')).toBe(true);
    expect((await readEntry(facts, ou.groupDn))!.member).toContain(dn);

    const deletion: LdifRecord[] = [
      { changetype: 'modify', dn: ou.groupDn, changes: [{ operation: 'delete', attribute: { name: 'member', values: [dn] } }], line: 1 },
      { changetype: 'delete', dn, line: 5 },
    ];
    const deleted = await c.executeLdif(deletion, 'continue-past-errors');
    expect(deleted).toMatchObject({ ok: true, errors: [] });
    expect(await readEntry(facts, dn)).toBeUndefined();
    expect((await readEntry(facts, ou.groupDn))!.member).not.toContain(dn);

    // Running the deletion again finds everything already gone, which is success.
    const again = await c.executeLdif(deletion, 'continue-past-errors');
    expect(again.ok).toBe(true);
    expect(again.results.map((r) => r.status)).toEqual(['already-gone', 'already-gone']);
  });

  it('stops at the first error and does not run later records', async () => {
    const c = client();
    const a = `cn=first,${ou.usersDn}`;
    const b = `cn=third,${ou.usersDn}`;
    const result = await c.executeLdif([
      add(a, { objectClass: ['inetOrgPerson'], cn: ['first'], sn: ['f'] }, 1),
      add(a, { objectClass: ['inetOrgPerson'], cn: ['first'], sn: ['f'], userPassword: ['Secret-In-Ldif-7'] }, 6),
      add(b, { objectClass: ['inetOrgPerson'], cn: ['third'], sn: ['t'] }, 12),
    ], 'stop-at-first-error');
    expect(result.ok).toBe(false);
    expect(result.results.map((r) => r.status)).toEqual(['ok', 'failed', 'not-run']);
    expect(result.errors).toHaveLength(1);
    const err = result.errors[0]!;
    expect(err.kind).toBe('input');
    expect(err.ldapCode).toBe(68);
    expect(err.message).toMatch(/^failed to run AddRequest for "cn=first,.*" \(LDIF line 6\): LDAP result code 68/);
    expect(err.message).not.toContain('Secret-In-Ldif-7');
    expect(await readEntry(facts, a)).toBeTruthy();
    expect(await readEntry(facts, b)).toBeUndefined();
  });

  it('continues past errors (rollback / deletion) and reports each one', async () => {
    const c = client();
    const victim = ou.users[2]!.dn;
    const result = await c.executeLdif([
      { changetype: 'delete', dn: `cn=never-created,${ou.usersDn}`, line: 1 },
      add(`cn=bad,${ou.usersDn}`, { objectClass: ['inetOrgPerson'], cn: ['bad'] }, 3), // no sn: objectClassViolation
      { changetype: 'modify', dn: `cn=ghost,${ou.groupsDn}`, changes: [{ operation: 'replace', attribute: { name: 'description', values: ['x'] } }], line: 7 },
      { changetype: 'delete', dn: ou.groupsDn, line: 10 }, // has children: notAllowedOnNonLeaf
      { changetype: 'delete', dn: victim, line: 12 },
    ], 'continue-past-errors');
    expect(result.ok).toBe(false);
    expect(result.results.map((r) => r.status)).toEqual(['already-gone', 'failed', 'failed', 'failed', 'ok']);
    expect(result.errors.map((e) => e.ldapCode)).toEqual([65, 32, 66]);
    expect(result.errors[1]!.message).toContain('ModifyRequest');
    expect(result.errors[2]!.message).toContain('DelRequest');
    expect(await readEntry(facts, victim)).toBeUndefined();
  });

  it('a missing entry is a failure when creating (only cleanup treats it as gone)', async () => {
    const result = await client().executeLdif([{ changetype: 'delete', dn: `cn=nope,${ou.usersDn}`, line: 1 }], 'stop-at-first-error');
    expect(result.results[0]!.status).toBe('failed');
  });

  it('binary values (::) survive, and a password attribute in the LDIF is scrubbed from errors', async () => {
    const c = client();
    const dn = `cn=bin,${ou.usersDn}`;
    const result = await c.executeLdif([{
      changetype: 'add', dn, line: 1,
      attributes: [
        { name: 'objectClass', values: ['inetOrgPerson'] }, { name: 'cn', values: ['bin'] }, { name: 'sn', values: ['b'] },
        { name: 'description', values: [Buffer.from('bytes é', 'utf8')] },
      ],
    }], 'stop-at-first-error');
    expect(result.ok).toBe(true);
    expect((await readEntry(facts, dn))!.description).toEqual(['bytes é']);
  });
});

/** A TCP proxy to slapd whose connections the test can cut, as a server idle timeout or a network blip would. */
async function cuttableProxy(): Promise<{ url: string; cut(): void; close(): void }> {
  const sockets = new Set<Socket>();
  const srv = createServer((down) => {
    const up = connect(facts.port, '127.0.0.1');
    for (const s of [down, up]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => sockets.delete(s));
    }
    down.pipe(up).pipe(down);
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  return {
    url: `ldap://127.0.0.1:${(srv.address() as { port: number }).port}`,
    cut: () => { for (const s of sockets) s.destroy(); },
    close: () => { srv.close(); for (const s of sockets) s.destroy(); },
  };
}

describe('session reuse', () => {
  it('re-binds on a new connection after the old one was cut, never running unauthenticated', async () => {
    const proxy = await cuttableProxy();
    try {
      const c = client({ url: proxy.url });
      await expect(c.findByDn(ou.users[0]!.dn)).resolves.toBeTruthy();
      proxy.cut();
      await new Promise((r) => setTimeout(r, 50));
      // An anonymous search would find nothing (ACL: users read only); finding it proves the re-bind.
      await expect(c.findByDn(ou.users[0]!.dn)).resolves.toMatchObject({ dn: ou.users[0]!.dn });
      await c.setPassword(ou.users[0]!.dn, 'After-Cut-1');
      expect(await canBind(facts.url, ou.users[0]!.dn, 'After-Cut-1')).toBe(true);
    } finally {
      proxy.close();
    }
  });


  it('keeps working after close() and under concurrent operations', async () => {
    const c = client();
    await c.findByDn(ou.users[0]!.dn);
    await c.close();
    await expect(c.findByDn(ou.users[0]!.dn)).resolves.toBeTruthy();
    const results = await Promise.all(ou.users.map((u, i) => c.setPassword(u.dn, `Concurrent-${i}-x`)));
    expect(results).toHaveLength(ou.users.length);
    for (const [i, u] of ou.users.entries()) expect(await canBind(facts.url, u.dn, `Concurrent-${i}-x`)).toBe(true);
  });
});
