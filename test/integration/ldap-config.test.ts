import { afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { canBind, createIsolatedOu, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { configure, cred, ok, ouConfig } from '../support/ldap-engine.ts';
import { freePort } from '../support/ports.ts';

const facts = inject('slapd');

let s: TestServer;
let ou: IsolatedOu;
beforeEach(async () => {
  s = await startTestServer();
  ou = await createIsolatedOu(facts);
});
afterEach(async () => {
  await s.close();
  await ou.cleanup();
});


/** Creates a static role for user0 (rotating it) and proves the password it serves binds. */
async function rotateUser0(name = 'probe'): Promise<string> {
  await ok(s, 'POST', `ldap/static-role/${name}`, { username: 'user0', rotation_period: '1h' });
  const c = await cred(s, name);
  expect(await canBind(facts.url, ou.users[0]!.dn, c.password)).toBe(true);
  return c.password;
}

describe('ldap/config write and read', () => {
  it('a minimal config reads back with defaults and without bindpass', async () => {
    await ok(s, 'POST', 'ldap/config', { binddn: ou.engine.dn, bindpass: ou.engine.password });
    const r = await s.request('GET', 'ldap/config');
    expect(r.status).toBe(200);
    expect(r.body.data).toEqual({
      binddn: ou.engine.dn, url: 'ldap://127.0.0.1', userdn: '', userattr: 'cn', upndomain: '', schema: 'openldap',
      credential_type: 'password', request_timeout: 90, connection_timeout: 30, starttls: false, insecure_tls: false,
      certificate: '', client_tls_cert: '', tls_min_version: 'tls12', tls_max_version: 'tls13', case_sensitive_names: false,
      skip_static_role_import_rotation: false,
      // Vault's Enterprise fields for automated root rotation read back their zero values, as Vault's do.
      rotation_period: 0, rotation_schedule: '', rotation_window: 0, disable_automated_rotation: false,
      verify_period: 0, drift_action: 'report', verify_rate: 5,
    });
    expect(JSON.stringify(r.body)).not.toContain(ou.engine.password);
  });

  it('a read before any write is 404', async () => {
    expect((await s.request('GET', 'ldap/config')).status).toBe(404);
  });

  it.each([
    ['openldap', undefined, 'cn'],
    ['ad', undefined, 'userPrincipalName'],
    ['racf', undefined, 'racfid'],
    ['openldap', 'uid', 'uid'],
  ])('schema %s with userattr %s reads userattr %s', async (schema, userattr, expected) => {
    await ok(s, 'POST', 'ldap/config', { binddn: ou.engine.dn, bindpass: 'x', schema, ...(userattr ? { userattr } : {}) });
    expect((await s.request('GET', 'ldap/config')).body.data.userattr).toBe(expected);
  });

  it('coerces types the Vault way (strings to bools, durations, ints) and echoes length and password_policy only when set', async () => {
    await ok(s, 'POST', 'ldap/config', { binddn: ou.engine.dn, bindpass: 'x', starttls: 'true', request_timeout: '2m', connection_timeout: 10, length: '20' });
    let d = (await s.request('GET', 'ldap/config')).body.data;
    expect(d).toMatchObject({ starttls: true, request_timeout: 120, connection_timeout: 10, length: 20 });
    expect(d).not.toHaveProperty('password_policy');
    await ok(s, 'POST', 'ldap/config', { length: 0, password_policy: 'mine' });
    d = (await s.request('GET', 'ldap/config')).body.data;
    expect(d.password_policy).toBe('mine');
    expect(d).not.toHaveProperty('length');
  });

  it('an update keeps every field it does not send (bindpass, certificate, schema, policy, length, credential_type)', async () => {
    await ok(s, 'POST', 'ldap/config', {
      ...ouConfig(facts, ou), certificate: facts.caCertPem, schema: 'racf', credential_type: 'phrase', length: 8, skip_static_role_import_rotation: true,
    });
    await ok(s, 'POST', 'ldap/config', { userdn: ou.usersDn });
    const d = (await s.request('GET', 'ldap/config')).body.data;
    expect(d).toMatchObject({ certificate: facts.caCertPem, schema: 'racf', credential_type: 'phrase', length: 8, skip_static_role_import_rotation: true, userdn: ou.usersDn, userattr: 'racfid' });
    // bindpass was kept: switching back to openldap, the engine still binds.
    await ok(s, 'POST', 'ldap/config', { schema: 'openldap', userattr: 'cn', length: 0, skip_static_role_import_rotation: false });
    await rotateUser0();
  });

  it.each([
    [{ bindpass: 'x' }, 'binddn'],
    [{ binddn: 'cn=a,dc=b' }, 'bindpass'],
    [{ binddn: 'not a dn', bindpass: 'x' }, 'binddn'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', length: 12, password_policy: 'p' }, "cannot set both 'password_policy' and 'length'"],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', schema: 'novell' }, 'schema'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', schema: '' }, 'schema'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', credential_type: 'pin' }, 'credential_type'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', tls_min_version: 'ssl3' }, 'tls_min_version'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', tls_min_version: 'tls13', tls_max_version: 'tls12' }, 'tls_max_version'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', certificate: 'not pem' }, 'certificate'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', client_tls_cert: facts.clientCertPem }, 'client_tls_cert'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', client_tls_cert: facts.clientCertPem, client_tls_key: 'nope' }, 'client_tls_key'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', url: 'http://127.0.0.1' }, 'url'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', userdn: 'ou=x,,' }, 'userdn'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', userattr: 'bad attr' }, 'userattr'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', request_timeout: 'soon' }, 'request_timeout'],
    [{ binddn: 'cn=a,dc=b', bindpass: 'x', length: 2 }, 'length'],
  ])('%j is a 400 naming %s', async (body, name) => {
    const r = await s.request('POST', 'ldap/config', { body });
    expect(r.status).toBe(400);
    expect(r.body.errors.join(' ')).toContain(name);
    expect(JSON.stringify(r.body)).not.toContain('nope');
  });

  it('a policy set over a stored length is refused until length is cleared', async () => {
    await ok(s, 'POST', 'ldap/config', { binddn: 'cn=a,dc=b', bindpass: 'x', length: 12 });
    expect((await s.request('POST', 'ldap/config', { body: { password_policy: 'p' } })).status).toBe(400);
    await ok(s, 'POST', 'ldap/config', { password_policy: 'p', length: 0 });
  });
});

describe('password generation', () => {
  it('uses the default generator: 64 base62 characters', async () => {
    await configure(s, facts, ou);
    expect(await rotateUser0()).toMatch(/^[A-Za-z0-9]{64}$/);
  });

  it('length (deprecated) sets the length', async () => {
    await configure(s, facts, ou, { length: 12 });
    expect(await rotateUser0()).toMatch(/^[A-Za-z0-9]{12}$/);
  });

  it('password_policy is resolved when a password is generated, not when the config is written', async () => {
    await configure(s, facts, ou, { password_policy: 'lower20' });
    const r = await s.request('POST', 'ldap/static-role/probe', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('password policy "lower20" does not exist');
    // Nothing changed in the directory, nothing was stored.
    expect(await canBind(facts.url, ou.users[0]!.dn, ou.users[0]!.password)).toBe(true);
    expect((await s.request('GET', 'ldap/static-role/probe')).status).toBe(404);
    await ok(s, 'POST', 'sys/policies/password/lower20', { policy: 'length = 20\nrule "charset" {\n  charset = "abcdefghijklmnopqrstuvwxyz"\n}\n' });
    expect(await rotateUser0()).toMatch(/^[a-z]{20}$/);
  });
});

describe('connections', () => {
  it('tries the URLs of a comma-separated list in order on connection errors', async () => {
    await configure(s, facts, ou, { url: `ldap://127.0.0.1:${await freePort()},${facts.url}` });
    await rotateUser0();
  });

  it('answers 502 when no URL is reachable, naming each', async () => {
    const port = await freePort();
    await configure(s, facts, ou, { url: `ldap://127.0.0.1:${port}` });
    const r = await s.request('POST', 'ldap/static-role/probe', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(502);
    expect(r.body.errors[0]).toContain(`127.0.0.1:${port}`);
  });

  it('a wrong bind password is a 502 that does not echo it', async () => {
    await configure(s, facts, ou, { bindpass: 'Wrong-Secret-123' });
    const r = await s.request('POST', 'ldap/static-role/probe', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(502);
    expect(JSON.stringify(r.body)).not.toContain('Wrong-Secret-123');
  });

  it('LDAPS verifies the server against the configured CA', async () => {
    await configure(s, facts, ou, { url: facts.ldapsUrl, certificate: facts.caCertPem });
    await rotateUser0();
  });

  it('StartTLS verifies too: without the CA it fails, with it (or insecure_tls) it works', async () => {
    await configure(s, facts, ou, { starttls: true });
    const r = await s.request('POST', 'ldap/static-role/probe', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(502);
    await ok(s, 'POST', 'ldap/config', { certificate: facts.caCertPem });
    await rotateUser0('probe');
    await ok(s, 'POST', 'ldap/config', { certificate: '', insecure_tls: true });
    await ok(s, 'POST', 'ldap/rotate-role/probe');
  });

  it('presents a client certificate when configured and never returns the key', async () => {
    await configure(s, facts, ou, { url: facts.ldapsUrl, certificate: facts.caCertPem, client_tls_cert: facts.clientCertPem, client_tls_key: facts.clientKeyPem });
    await rotateUser0();
    const d = (await s.request('GET', 'ldap/config')).body;
    expect(d.data.client_tls_cert).toBe(facts.clientCertPem);
    expect(JSON.stringify(d)).not.toContain('PRIVATE KEY');
  });

  it('a config update takes effect at once (the cached client is rebuilt)', async () => {
    await configure(s, facts, ou);
    await rotateUser0('one');
    await ok(s, 'POST', 'ldap/config', { bindpass: 'now-wrong' });
    expect((await s.request('POST', 'ldap/rotate-role/one')).status).toBe(502);
    await ok(s, 'POST', 'ldap/config', { bindpass: ou.engine.password });
    await ok(s, 'POST', 'ldap/rotate-role/one');
  });
});

describe('DELETE ldap/config', () => {
  it('removes the config; later operations answer 400 missing configuration', async () => {
    await configure(s, facts, ou);
    expect((await s.request('DELETE', 'ldap/config')).status).toBe(204);
    expect((await s.request('GET', 'ldap/config')).status).toBe(404);
    const r = await s.request('POST', 'ldap/static-role/probe', { body: { username: 'user0', rotation_period: '1h' } });
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toContain('missing LDAP configuration');
    expect((await s.request('POST', 'ldap/rotate-root')).status).toBe(400);
    // Deleting again is fine.
    expect((await s.request('DELETE', 'ldap/config')).status).toBe(204);
  });

  it('is refused while static roles exist, naming them; allowed once they are gone', async () => {
    await configure(s, facts, ou);
    await ok(s, 'POST', 'ldap/static-role/org/a', { username: 'user0', rotation_period: '1h' });
    await ok(s, 'POST', 'ldap/static-role/b', { username: 'user1', rotation_period: '1h', skip_import_rotation: true });
    const r = await s.request('DELETE', 'ldap/config');
    expect(r.status).toBe(400);
    expect(r.body.errors[0]).toBe('cannot delete the configuration while 2 static roles (b, org/a) use it; delete them first');
    expect((await s.request('GET', 'ldap/config')).status).toBe(200);
    await ok(s, 'DELETE', 'ldap/static-role/org/a');
    await ok(s, 'DELETE', 'ldap/static-role/b');
    expect((await s.request('DELETE', 'ldap/config')).status).toBe(204);
  });
});
