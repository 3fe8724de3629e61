import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { FakeClock } from '../../src/core/clock.ts';
import { issueToken } from '../../src/core/token-issue.ts';
import { canBind, createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const facts = inject('slapd');
const clock = new FakeClock();
let server: TestServer;
let ou: IsolatedOu;

beforeAll(async () => {
  server = await startTestServer({ clock });
});
afterAll(async () => {
  await server.close();
});
beforeEach(async () => {
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 0 });
  const res = await server.request('POST', 'ldap/config', { body: { binddn: ou.engine.dn, bindpass: ou.engine.password, url: facts.url, request_timeout: 5 } });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
});
afterEach(async () => {
  await server.core.leases.idle();
  await ou.cleanup();
});

/** A user with a password plus membership of the OU's group: the README's example shape. */
function ldif(o: IsolatedOu) {
  const userDn = `cn={{.Username}},${o.usersDn}`;
  return {
    creation_ldif: [
      `dn: ${userDn}`,
      'objectClass: inetOrgPerson',
      'cn: {{.Username}}',
      'sn: {{.DisplayName}}',
      'description: role {{.RoleName}} until {{.ExpirationTime}}',
      'userPassword: {{.Password}}',
      '',
      `dn: ${o.groupDn}`,
      'changetype: modify',
      'add: member',
      `member: ${userDn}`,
      '-',
      '',
    ].join('\n'),
    deletion_ldif: [
      `dn: ${o.groupDn}`,
      'changetype: modify',
      'delete: member',
      `member: ${userDn}`,
      '-',
      '',
      `dn: ${userDn}`,
      'changetype: delete',
      '',
    ].join('\n'),
    rollback_ldif: `dn: ${userDn}\nchangetype: delete\n`,
  };
}

async function writeRole(name: string, body: Record<string, unknown> = {}) {
  const res = await server.request('POST', `ldap/role/${name}`, { body: { ...ldif(ou), ...body } });
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
  return res;
}

async function issue(name: string, token = 'root') {
  const res = await server.request('GET', `ldap/creds/${name}`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { lease_id: string; lease_duration: number; renewable: boolean; data: { username: string; password: string; distinguished_names: string[] } };
}

const userDnOf = (username: string) => `cn=${username},${ou.usersDn}`;
const members = async () => (await readEntry(facts, ou.groupDn))?.member ?? [];

describe('role/:name', () => {
  it('read returns exactly the Vault fields; LDIF sent base64 encoded reads back decoded', async () => {
    const { creation_ldif, deletion_ldif } = ldif(ou);
    await writeRole('shape', { creation_ldif: Buffer.from(creation_ldif).toString('base64'), rollback_ldif: undefined, default_ttl: '5m', max_ttl: 3600 });
    const res = await server.request('GET', 'ldap/role/shape');
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ creation_ldif, deletion_ldif, rollback_ldif: '', username_template: '', default_ttl: 300, max_ttl: 3600 });
  });

  it('a write without rollback_ldif warns that a failed creation would leave entries behind', async () => {
    const { creation_ldif, deletion_ldif } = ldif(ou);
    const res = await server.request('POST', 'ldap/role/nowarn', { body: { creation_ldif, deletion_ldif } });
    expect(res.status).toBe(200);
    expect(res.body.warnings[0]).toMatch(/rollback_ldif is not set/);
    expect((await server.request('POST', 'ldap/role/nowarn', { body: { rollback_ldif: ldif(ou).rollback_ldif } })).status).toBe(204);
  });

  it('partial update: only sent keys change, "" clears a key, "" for a required LDIF is a 400 that leaves the role unchanged', async () => {
    await writeRole('partial', { username_template: '{{.RoleName}}_{{random 4}}', default_ttl: 60, max_ttl: 120 });
    expect((await server.request('POST', 'ldap/role/partial', { body: { default_ttl: 90 } })).status).toBe(204);
    let data = (await server.request('GET', 'ldap/role/partial')).body.data;
    expect(data).toMatchObject({ username_template: '{{.RoleName}}_{{random 4}}', default_ttl: 90, max_ttl: 120, rollback_ldif: ldif(ou).rollback_ldif });

    expect((await server.request('POST', 'ldap/role/partial', { body: { username_template: '', max_ttl: '' } })).status).toBe(204);
    data = (await server.request('GET', 'ldap/role/partial')).body.data;
    expect(data).toMatchObject({ username_template: '', max_ttl: 0, default_ttl: 90 });

    const bad = await server.request('POST', 'ldap/role/partial', { body: { creation_ldif: '', default_ttl: 5 } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual(['missing required field "creation_ldif"']);
    expect((await server.request('GET', 'ldap/role/partial')).body.data).toEqual(data);
  });

  it('template parse errors are a 400 at role write with line and column', async () => {
    const res = await server.request('POST', 'ldap/role/broken', { body: { ...ldif(ou), deletion_ldif: `dn: cn=x,${ou.usersDn}\nchangetype: delete\n{{ if }}` } });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/^invalid value for field "deletion_ldif": template error at line 3, column \d+: /);
    expect((await server.request('GET', 'ldap/role/broken')).status).toBe(404);
  });

  it('creating a role requires both creation_ldif and deletion_ldif; bad LDIF and bad TTLs are 400s naming the field', async () => {
    expect((await server.request('POST', 'ldap/role/r', { body: { creation_ldif: ldif(ou).creation_ldif } })).body.errors).toEqual(['missing required field "deletion_ldif"']);
    expect((await server.request('POST', 'ldap/role/r', { body: { ...ldif(ou), rollback_ldif: 'foo bar' } })).body.errors[0]).toMatch(/field "rollback_ldif": rendered LDIF is invalid/);
    expect((await server.request('POST', 'ldap/role/r', { body: { ...ldif(ou), default_ttl: 'soon' } })).body.errors[0]).toMatch(/field "default_ttl"/);
    const tooLong = await server.request('POST', 'ldap/role/r', { body: { ...ldif(ou), max_ttl: '100000h' } });
    expect(tooLong.status).toBe(400);
    expect(tooLong.body.errors[0]).toMatch(/field "max_ttl": .* longer than the mount's maximum lease TTL/);
  });

  it('names are lower-cased on every path; LIST shows direct children with folders ending in "/"', async () => {
    await writeRole('Org/Platform/Dev');
    await writeRole('org/secure');
    await writeRole('top');
    expect((await server.request('GET', 'ldap/role/org/platform/dev')).status).toBe(200);
    expect((await server.request('LIST', 'ldap/role/ORG/')).body.data.keys).toEqual(['platform/', 'secure']);
    expect((await server.request('LIST', 'ldap/role')).body.data.keys).toEqual(expect.arrayContaining(['org/', 'top']));
    expect((await server.request('LIST', 'ldap/role/org/platform/')).body.data.keys).toEqual(['dev']);
    const creds = await issue('ORG/Platform/Dev');
    expect(creds.data.username).toMatch(/^v_root_org\/platform\/dev_[A-Za-z0-9]{10}_\d+$/);
    await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } });
  });

  it('delete answers 204 and the role is gone', async () => {
    await writeRole('gone');
    expect((await server.request('DELETE', 'ldap/role/gone')).status).toBe(204);
    expect((await server.request('GET', 'ldap/role/gone')).status).toBe(404);
    expect((await server.request('GET', 'ldap/creds/gone')).status).toBe(404);
  });
});

describe('creds/:name', () => {
  it('creates a real entry whose password binds and that is in the group; distinguished_names lists every record', async () => {
    await writeRole('dev', { default_ttl: 600 });
    const creds = await issue('dev');
    expect(creds.data.username).toMatch(new RegExp(`^v_root_dev_[A-Za-z0-9]{10}_${Math.floor(clock.now() / 1000)}$`));
    expect(creds.data.password).toMatch(/^\S{8,}$/);
    expect(creds.data.distinguished_names).toEqual([userDnOf(creds.data.username), ou.groupDn]);
    expect(creds.lease_id).toMatch(/^ldap\/creds\/dev\//);
    expect(creds.lease_duration).toBe(600);
    expect(creds.renewable).toBe(true);
    expect(await canBind(facts.url, userDnOf(creds.data.username), creds.data.password)).toBe(true);
    expect(await members()).toContain(userDnOf(creds.data.username));
    const entry = await readEntry(facts, userDnOf(creds.data.username));
    expect(entry?.description).toEqual([`role dev until ${new Date(clock.now() + 600_000).toISOString()}`]);
    await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } });
  });

  it('revoke through sys/leases/revoke deletes the entry and its group membership', async () => {
    await writeRole('dev');
    const creds = await issue('dev');
    const res = await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } });
    expect(res.status).toBe(204);
    expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined();
    expect(await members()).not.toContain(userDnOf(creds.data.username));
    expect(await members()).toContain(ou.users[0]!.dn);
  });

  it('expiry deletes the entry when the lease TTL passes (advanced clock)', async () => {
    await writeRole('short', { default_ttl: 30 });
    const creds = await issue('short');
    await clock.advance(29_000);
    expect(await readEntry(facts, userDnOf(creds.data.username))).toBeDefined();
    await clock.advance(2_000);
    await server.core.leases.idle();
    await vi.waitFor(async () => expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined());
    expect(await members()).not.toContain(userDnOf(creds.data.username));
  });

  it('revoking the token that requested the credentials deletes the entry', async () => {
    await writeRole('dev');
    const child = await server.request('POST', 'auth/token/create', { body: { policies: ['root'], display_name: 'ci' } });
    const token = child.body.auth.client_token as string;
    const creds = await issue('dev', token);
    expect(creds.data.username).toMatch(/^v_token-ci_dev_/);
    expect((await server.request('POST', 'auth/token/revoke', { body: { token } })).status).toBe(204);
    await server.core.leases.idle();
    await vi.waitFor(async () => expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined());
  });

  it('a role deleted (or changed) before its lease expires still gets its accounts removed', async () => {
    await writeRole('temp', { default_ttl: 60 });
    const a = await issue('temp');
    await writeRole('temp', { deletion_ldif: `dn: cn=nobody,${ou.usersDn}\nchangetype: delete\n` });
    const b = await issue('temp');
    expect((await server.request('DELETE', 'ldap/role/temp')).status).toBe(204);
    await clock.advance(61_000);
    await server.core.leases.idle();
    await vi.waitFor(async () => expect(await readEntry(facts, userDnOf(a.data.username))).toBeUndefined());
    expect(await members()).not.toContain(userDnOf(a.data.username));
    // b's lease carries the edited deletion LDIF (which misses b's entry): edits apply to new leases only.
    expect(await readEntry(facts, userDnOf(b.data.username))).toBeDefined();
  });

  it('a changed role is used by the very next request: its username template, its LDIF and its TTL', async () => {
    await writeRole('edit', { default_ttl: 600 });
    const before = await issue('edit');
    expect(before.data.username).toMatch(/^v_root_edit_/);
    const creation = ldif(ou).creation_ldif.replace('description: role {{.RoleName}}', 'description: edited {{.RoleName}}');
    await writeRole('edit', { username_template: 'e_{{.RoleName}}_{{random 8}}', creation_ldif: creation, default_ttl: 300 });
    const after = await issue('edit');
    expect(after.data.username).toMatch(/^e_edit_[A-Za-z0-9]{8}$/);
    expect(after.lease_duration).toBe(300);
    expect((await readEntry(facts, userDnOf(after.data.username)))?.description).toEqual([`edited edit until ${new Date(clock.now() + 300_000).toISOString()}`]);
    // Deleted, then written again under the same name: the new role, never the one remembered.
    expect((await server.request('DELETE', 'ldap/role/edit')).status).toBe(204);
    expect((await server.request('GET', 'ldap/creds/edit')).status).toBe(404);
    await writeRole('edit', { username_template: 'f_{{.RoleName}}_{{random 8}}' });
    const again = await issue('edit');
    expect(again.data.username).toMatch(/^f_edit_/);
    for (const c of [before, after, again]) expect((await server.request('POST', 'sys/leases/revoke', { body: { lease_id: c.lease_id } })).status).toBe(204);
  });

  it('renew is capped by max_ttl; renewing after the role was deleted is refused', async () => {
    await writeRole('renew', { default_ttl: 60, max_ttl: 100 });
    const creds = await issue('renew');
    await clock.advance(50_000);
    const renewed = await server.request('POST', 'sys/leases/renew', { body: { lease_id: creds.lease_id, increment: 3600 } });
    expect(renewed.status).toBe(200);
    expect(renewed.body.lease_duration).toBe(50);
    await server.request('DELETE', 'ldap/role/renew');
    const refused = await server.request('POST', 'sys/leases/renew', { body: { lease_id: creds.lease_id } });
    expect(refused.status).toBe(400);
    expect(refused.body.errors[0]).toMatch(/dynamic role "renew" no longer exists/);
    await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } });
    expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined();
  });

  it('a creation failure runs the rollback LDIF, leaves no partial entries and reports every error', async () => {
    // The second record adds a member to a group that does not exist: the user is created, then rolled back.
    const missingGroup = `cn=missing,${ou.groupsDn}`;
    await writeRole('fails', { creation_ldif: ldif(ou).creation_ldif.replace(ou.groupDn, missingGroup) });
    const res = await server.request('GET', 'ldap/creds/fails');
    expect(res.status).toBe(400);
    expect(res.body.errors).toHaveLength(1);
    expect(res.body.errors[0]).toMatch(/^failed to create user: failed to run ModifyRequest for "cn=missing,.*noSuchObject/);
    const { searchEntries } = await listUsers();
    expect(searchEntries.map((e) => e.dn)).toEqual([ou.users[0]!.dn]);
    expect(await server.request('LIST', 'sys/leases/lookup/ldap/creds/fails/')).toMatchObject({ status: 404 });
  });

  it('when the rollback also fails, both failures are reported', async () => {
    await writeRole('fails2', {
      creation_ldif: ldif(ou).creation_ldif.replace(ou.groupDn, `cn=missing,${ou.groupsDn}`),
      rollback_ldif: `dn: cn={{.Username}},ou=nowhere,${ou.dn}\nchangetype: modify\nreplace: sn\nsn: x\n-\n\ndn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
    });
    const res = await server.request('GET', 'ldap/creds/fails2');
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/^failed to create user: /);
    expect(res.body.errors[1]).toMatch(/^failed to roll back user creation: failed to run ModifyRequest for "cn=v_root_fails2_/);
    expect(res.body.errors).toHaveLength(2);
    // The rollback continued past its first error and still deleted the user.
    expect((await listUsers()).searchEntries.map((e) => e.dn)).toEqual([ou.users[0]!.dn]);
  });

  it('the lease is stored before the account is created: a crash after creation still ends in the deletion LDIF', async () => {
    await writeRole('walled', { default_ttl: 60 });
    const register = server.core.leases.register.bind(server.core.leases);
    let usersWhenLeaseStored: string[] | undefined;
    const spy = vi.spyOn(server.core.leases, 'register').mockImplementation(async (entry) => {
      usersWhenLeaseStored = (await listUsers()).searchEntries.map((e) => e.dn);
      return register(entry);
    });
    try {
      const creds = await issue('walled');
      expect(spy).toHaveBeenCalledTimes(1);
      expect(usersWhenLeaseStored).toEqual([ou.users[0]!.dn]);
      // Whether or not the caller ever saw the answer, the lease owns the account from before it existed.
      expect(await readEntry(facts, userDnOf(creds.data.username))).toBeDefined();
      await clock.advance(61_000);
      await server.core.leases.idle();
      await vi.waitFor(async () => expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined());
    } finally {
      spy.mockRestore();
    }
  });

  it('the config cannot be deleted while dynamic credential leases are outstanding (their accounts need it to be deleted)', async () => {
    // Leases other tests left behind would be named too.
    expect((await server.request('POST', 'sys/leases/revoke-prefix/ldap/creds')).status).toBe(204);
    await writeRole('outlives');
    const creds = await issue('outlives');
    expect((await server.request('DELETE', 'ldap/role/outlives')).status).toBe(204);
    const refused = await server.request('DELETE', 'ldap/config');
    expect(refused.status).toBe(400);
    // Other tests' roles may be named too; the lease must be, with what to do about it.
    expect(refused.body.errors[0]).toMatch(/^cannot delete the configuration while /);
    expect(refused.body.errors[0]).toContain(`1 outstanding dynamic credential leases (${creds.lease_id}) use it;`);
    expect(refused.body.errors[0]).toMatch(/revoke them first$/);
    expect((await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } })).status).toBe(204);
    expect(await readEntry(facts, userDnOf(creds.data.username))).toBeUndefined();
    const after = await server.request('DELETE', 'ldap/config');
    expect(after.status === 204 || !after.body.errors[0].includes('leases')).toBe(true);
  });

  it('without rollback_ldif a failed creation says which changes were left in place', async () => {
    const { creation_ldif, deletion_ldif } = ldif(ou);
    await server.request('POST', 'ldap/role/norollback', { body: { deletion_ldif, creation_ldif: creation_ldif.replace(ou.groupDn, `cn=missing,${ou.groupsDn}`) } });
    const res = await server.request('GET', 'ldap/creds/norollback');
    expect(res.status).toBe(400);
    expect(res.body.errors).toHaveLength(2);
    expect(res.body.errors[1]).toMatch(new RegExp(`^no rollback_ldif is set, so these changes were left in place: "cn=v_root_norollback_[A-Za-z0-9]{10}_\\d+,${ou.usersDn}"$`));
  });

  it('an unreachable directory is a 502', async () => {
    await writeRole('down');
    await server.request('POST', 'ldap/config', { body: { binddn: ou.engine.dn, bindpass: ou.engine.password, url: 'ldap://127.0.0.1:1', request_timeout: 2 } });
    const res = await server.request('GET', 'ldap/creds/down');
    expect(res.status).toBe(502);
  });

  it('an unknown role is a 404', async () => {
    expect((await server.request('GET', 'ldap/creds/nope')).status).toBe(404);
  });

  it('injection: a display name with a newline and "dn:" is refused (400) and nothing is created', async () => {
    await writeRole('inj', { username_template: 'v_{{.RoleName}}_{{random 8}}' });
    const { token } = await issueToken(server.core, {
      policies: ['root'], path: 'auth/test/login', displayName: `x\ndn: cn=admin,${ou.dn}\nchangetype: delete`, ttl: 600, parent: '', renewable: false,
    });
    const res = await server.request('GET', 'ldap/creds/inj', { token });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/^invalid value for field "creation_ldif": LDIF template value \{\{\.DisplayName\}\} contains a line break/);
    expect(res.body.errors[0]).not.toContain('admin');
    expect((await listUsers()).searchEntries).toHaveLength(1);
  });

  it('injection: a username with ":" or "dn:" stays inside its value; one with "," is refused before it can move the DN', async () => {
    await writeRole('colon', { username_template: 'dn:{{.RoleName}}:{{random 6}}' });
    const creds = await issue('colon');
    expect(creds.data.username).toMatch(/^dn:colon:/);
    expect(await canBind(facts.url, userDnOf(creds.data.username), creds.data.password)).toBe(true);
    await server.request('POST', 'sys/leases/revoke', { body: { lease_id: creds.lease_id } });

    const { token } = await issueToken(server.core, { policies: ['root'], path: 'auth/test/login', displayName: 'x,ou=admins', ttl: 600, parent: '', renewable: false });
    await writeRole('comma', { username_template: '{{.DisplayName}}' });
    const res = await server.request('GET', 'ldap/creds/comma', { token });
    expect(res.status).toBe(400);
    expect(res.body.errors[0]).toMatch(/field "username_template": the generated username contains ","/);
  });
});

async function listUsers() {
  const { Client } = await import('ldapts');
  const c = new Client({ url: facts.url });
  try {
    await c.bind(facts.rootDn, facts.rootPassword);
    return await c.search(ou.usersDn, { scope: 'one', attributes: ['1.1'] });
  } finally {
    await c.unbind();
  }
}
