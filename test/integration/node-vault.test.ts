// A real third-party Vault client, node-vault, drives every mount of a listening server as a new user would:
// its own commands where it has them, its generic read/write/list/delete where it has none (the cloud and
// ldap engines, mount tuning, lease lookup, capabilities). What the server made is checked against slapd and
// the Azure emulator.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import nodeVault from 'node-vault';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { ENV_NAME, tokenWorks } from '../support/cloud-engine.ts';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { auditDir, readEntries } from '../support/audit.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { canBind, createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';

const facts = inject('slapd');
let full: FullServer;
let ou: IsolatedOu;

beforeAll(async () => {
  full = await startFullServer({ listen: true });
  ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 2 });
});
afterAll(async () => {
  await full?.server.core.leases.idle();
  await full?.close();
  await ou?.cleanup();
});

/** A client of its own per use: node-vault switches a client to any token it creates, renews or logs in with. */
const client = (token = 'root') => nodeVault({ endpoint: full.server.url, token, apiVersion: 'v1' });

const dynamicRole = () => ({
  creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: node-vault\nuserPassword: {{.Password}}\n`,
  deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
  default_ttl: '1h',
  max_ttl: '2h',
});

describe('an unmodified Vault client (node-vault) drives the server', () => {
  it('"writes and reads a policy, creates a token, lists mounts with LIST, revokes"', async () => {
    const vault = client();
    await vault.addPolicy({ name: 'ci', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    const policy = await vault.getPolicy({ name: 'ci' });
    expect(policy.rules ?? policy.data?.rules).toMatch(/sys\/mounts/);
    // node-vault switches a client to the token it creates (tokenSource), as the real Vault client does.
    const creator = client();
    const created = await creator.tokenCreate({ policies: ['ci'], ttl: '1h' });
    const token = created.auth.client_token as string;
    expect(creator.token).toBe(token);
    const listed = await vault.list('sys/policies/acl');
    expect(listed.data.keys).toContain('ci');
    const asCi = client(token);
    const mounts = await asCi.mounts();
    expect(mounts.data['sys/'].type).toBe('system');
    await expect(asCi.list('sys/policies/acl')).rejects.toMatchObject({ response: { statusCode: 403 } });
    await vault.tokenRevoke({ token });
    await expect(asCi.mounts()).rejects.toMatchObject({ response: { statusCode: 403 } });
  });
});

describe('sys/mounts and sys/auth', () => {
  it('"enable, list, tune, move, disable": a secrets engine and an auth method through node-vault\'s mount commands (tune through write, the UI listing through read)', async () => {
    const vault = client();
    await vault.mount({ mount_point: 'ldap-nv', type: 'ldap', description: 'by node-vault', config: { default_lease_ttl: '1h', max_lease_ttl: '4h' } });
    expect((await vault.mounts()).data['ldap-nv/']).toMatchObject({ type: 'ldap', description: 'by node-vault', config: { default_lease_ttl: 3600, max_lease_ttl: 14400 } });
    await vault.write('sys/mounts/ldap-nv/tune', { default_lease_ttl: '30m', max_lease_ttl: '2h' });
    expect((await vault.read('sys/mounts/ldap-nv/tune')).data).toMatchObject({ default_lease_ttl: 1800, max_lease_ttl: 7200 });
    await vault.write('ldap-nv/config', ouConfig(facts, ou));
    const { migration_id: migration } = (await vault.remount({ from: 'ldap-nv', to: 'ldap-nv-moved' })).data;
    expect((await vault.read(`sys/remount/status/${migration}`)).data.migration_info).toMatchObject({ source_mount: 'ldap-nv/', target_mount: 'ldap-nv-moved/', status: 'success' });
    const moved = (await vault.mounts()).data;
    expect(moved).not.toHaveProperty(['ldap-nv/']);
    expect(moved['ldap-nv-moved/']).toMatchObject({ type: 'ldap', description: 'by node-vault' });
    expect((await vault.read('ldap-nv-moved/config')).data).toMatchObject({ url: facts.url, binddn: ou.engine.dn });
    expect(Object.keys((await vault.read('sys/internal/ui/mounts')).data.secret)).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'ldap-nv-moved/']));
    expect((await vault.read('sys/internal/ui/mounts/ldap-nv-moved/static-role/app')).data).toMatchObject({ path: 'ldap-nv-moved/', type: 'ldap' });
    await vault.unmount({ mount_point: 'ldap-nv-moved' });
    expect((await vault.mounts()).data).not.toHaveProperty(['ldap-nv-moved/']);
    await vault.enableAuth({ mount_point: 'cloud-nv', type: 'cloud', description: 'auth by node-vault' });
    expect((await vault.auths()).data['cloud-nv/']).toMatchObject({ type: 'cloud', description: 'auth by node-vault' });
    await vault.disableAuth({ mount_point: 'cloud-nv' });
    expect((await vault.auths()).data).not.toHaveProperty(['cloud-nv/']);
  });

  it('"Vault\'s type names": mount({ type: "azure" }) and ({ type: "openldap" }), enableAuth({ type: "azure" }) mount cloud and ldap', async () => {
    const vault = client();
    await vault.mount({ mount_point: 'az-nv', type: 'azure' });
    await vault.mount({ mount_point: 'ol-nv', type: 'openldap' });
    await vault.enableAuth({ mount_point: 'az-nv', type: 'azure' });
    const mounts = (await vault.mounts()).data;
    expect([mounts['az-nv/'].type, mounts['ol-nv/'].type, (await vault.auths()).data['az-nv/'].type]).toEqual(['cloud', 'ldap', 'cloud']);
    await vault.unmount({ mount_point: 'az-nv' });
    await vault.unmount({ mount_point: 'ol-nv' });
    await vault.disableAuth({ mount_point: 'az-nv' });
  });
});

describe('sys/policy', () => {
  it('"create, read, list, delete" an ACL policy through node-vault\'s policy commands', async () => {
    const vault = client();
    await vault.addPolicy({ name: 'nv-reader', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    expect((await vault.getPolicy({ name: 'nv-reader' })).data).toMatchObject({ name: 'nv-reader', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    expect((await vault.policies()).data.policies).toContain('nv-reader');
    await vault.removePolicy({ name: 'nv-reader' });
    expect((await vault.policies()).data.policies).not.toContain('nv-reader');
  });
});

describe('sys/health, sys/init and sys/capabilities', () => {
  it('"health answers initialised, unsealed and active in Vault\'s shape"; "init says initialised"', async () => {
    const vault = client();
    expect(await vault.health()).toMatchObject({ initialized: true, sealed: false, standby: false, cluster_id: expect.any(String) });
    expect(await vault.initialized()).toEqual({ initialized: true });
  });

  it('"capabilities answers a token\'s capabilities per path": the caller\'s (capabilities-self), another token\'s, and by accessor (through write)', async () => {
    const vault = client();
    await vault.addPolicy({ name: 'nv-caps', rules: 'path "sys/mounts" { capabilities = ["read"] }\npath "ldap/static-cred/*" { capabilities = ["read", "list"] }' });
    const created = (await client().tokenCreate({ policies: ['nv-caps'], ttl: '10m' })).auth;
    const paths = ['sys/mounts', 'ldap/static-cred/app', 'ldap/config'];
    const answers = {
      self: await client(created.client_token).write('sys/capabilities-self', { paths }),
      token: await vault.write('sys/capabilities', { paths, token: created.client_token }),
      accessor: await vault.write('sys/capabilities-accessor', { paths, accessor: created.accessor }),
    };
    for (const [name, answer] of Object.entries(answers)) {
      expect(answer.data, name).toMatchObject({ 'sys/mounts': ['read'], 'ldap/static-cred/app': ['list', 'read'], 'ldap/config': ['deny'] });
    }
  });
});

describe('auth/token', () => {
  it('"create, lookup, renew, revoke" through node-vault\'s token commands', async () => {
    const vault = client();
    const created = (await client().tokenCreate({ policies: ['default'], ttl: '1h', meta: { team: 'node-vault' } })).auth;
    expect(created).toMatchObject({ policies: ['default'], lease_duration: 3600, metadata: { team: 'node-vault' }, renewable: true });
    const token = created.client_token as string;
    expect((await vault.tokenLookup({ token })).data).toMatchObject({ policies: ['default'], meta: { team: 'node-vault' }, creation_ttl: 3600, num_uses: 0 });
    expect((await client().tokenRenew({ token, increment: '2h' })).auth.lease_duration).toBe(7200);
    await vault.tokenRevoke({ token });
    await expect(vault.tokenLookup({ token })).rejects.toMatchObject({ response: { statusCode: 403 } });
  });

});

describe('auth/token/roles', () => {
  it('"create, read, list, delete a token role and create tokens against it" through node-vault\'s token role commands', async () => {
    const vault = client();
    await vault.addPolicy({ name: 'nv-role-policy', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    await vault.addTokenRole({ role_name: 'nv-role', allowed_policies: 'nv-role-policy', orphan: true, period: 3600, path_suffix: 'v1' });
    expect((await vault.getTokenRole({ role_name: 'nv-role' })).data).toMatchObject({
      name: 'nv-role', allowed_policies: ['nv-role-policy'], orphan: true, token_period: 3600, path_suffix: 'v1',
    });
    expect((await vault.tokenRoles()).data.keys).toContain('nv-role');
    const creator = client();
    const created = (await creator.tokenCreateRole({ role_name: 'nv-role' })).auth;
    expect(created).toMatchObject({ policies: ['default', 'nv-role-policy'], orphan: true, lease_duration: 3600 });
    expect(creator.token).toBe(created.client_token);
    expect((await vault.tokenLookup({ token: created.client_token })).data).toMatchObject({ path: 'auth/token/create/nv-role/v1', orphan: true, period: 3600 });
    await vault.removeTokenRole({ role_name: 'nv-role' });
    await expect(vault.getTokenRole({ role_name: 'nv-role' })).rejects.toMatchObject({ response: { statusCode: 404 } });
  });
});

describe('sys/audit', () => {
  it('"enable, list, hash, disable" a file audit device through node-vault\'s audit commands (the hash through write)', async () => {
    const vault = client();
    const logs = auditDir();
    try {
      await vault.enableAudit({ name: 'nv-file', type: 'file', options: { file_path: logs.file() } });
      expect((await vault.audits()).data['nv-file/']).toMatchObject({ type: 'file', options: { file_path: logs.file() } });
      const { data } = await vault.write('sys/audit-hash/nv-file', { input: 'a value' });
      expect(readEntries(logs.file()).find((e) => e.request.path === 'sys/audit-hash/nv-file')!.request.data).toEqual({ input: data.hash });
      await vault.disableAudit({ name: 'nv-file' });
      expect((await vault.audits()).data).toEqual({});
    } finally {
      logs.cleanup();
    }
  });
});

describe('sys/leases', () => {
  it('"lookup, renew, revoke" the lease of LDAP dynamic credentials (lookup through write); revoking it deletes the account', async () => {
    const vault = client();
    await vault.write('ldap/config', ouConfig(facts, ou));
    await vault.write('ldap/role/nv-lease', dynamicRole());
    const creds = await vault.read('ldap/creds/nv-lease');
    expect(creds).toMatchObject({ lease_duration: 3600, renewable: true, lease_id: expect.stringMatching(/^ldap\/creds\/nv-lease\//) });
    const looked = await vault.write('sys/leases/lookup', { lease_id: creds.lease_id });
    expect(looked.data).toMatchObject({ id: creds.lease_id, renewable: true });
    expect(await vault.renew({ lease_id: creds.lease_id, increment: 600 })).toMatchObject({ lease_id: creds.lease_id, lease_duration: 600 });
    await vault.revoke({ lease_id: creds.lease_id });
    await expect(vault.write('sys/leases/lookup', { lease_id: creds.lease_id })).rejects.toMatchObject({ response: { statusCode: 400 } });
    await full.server.core.leases.idle();
    expect(await readEntry(facts, creds.data.distinguished_names[0])).toBeUndefined();
  });
});

describe('cloud/', () => {
  it('"config, a role with azure_roles, creds, rotate-root" through write and read', async () => {
    const vault = client();
    const config = full.cloudConfig();
    await vault.write('cloud/config', config);
    await vault.write('cloud/roles/nv-reader', { azure_roles: full.readerRoles(), ttl: '1h' });
    expect((await vault.read('cloud/roles/nv-reader')).data).toMatchObject({
      ttl: 3600, cloud_roles: [expect.objectContaining({ role_name: 'Reader', scope: `/subscriptions/${full.world.tenant.subscriptionId}` })],
    });
    expect((await vault.list('cloud/roles')).data.keys).toContain('nv-reader');
    const creds = await vault.read('cloud/creds/nv-reader');
    expect(creds).toMatchObject({ lease_duration: 3600, lease_id: expect.stringMatching(/^cloud\/creds\/nv-reader\//) });
    expect(await tokenWorks(full.world, creds.data.client_id, creds.data.client_secret)).toBe(true);
    await vault.write('cloud/rotate-root', {});
    const read = (await vault.read('cloud/config')).data;
    expect(read).toMatchObject({ client_id: config.client_id, environment: ENV_NAME, root_password_expiration_date: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) });
    expect(read).not.toHaveProperty('client_secret');
    expect(await tokenWorks(full.world, config.client_id as string, config.client_secret as string)).toBe(false);
    const after = await vault.read('cloud/creds/nv-reader');
    expect(await tokenWorks(full.world, after.data.client_id, after.data.client_secret)).toBe(true);
  });

  it('"static roles": static-roles write/read/list, static-creds (no lease), its /token, rotate-role and import through write, read and list', async () => {
    const vault = client();
    // The test above may have rotated the root secret: the config is written only when there is none.
    if (!(await vault.read('cloud/config').catch(() => undefined))) await vault.write('cloud/config', full.cloudConfig());
    const app = seedApp(full.world.emu.state, { displayName: 'nv-static' });
    await vault.write('cloud/static-roles/nv-static', { application_object_id: app.objectId, ttl: '720h', metadata: { team: 'nv' } });
    expect((await vault.read('cloud/static-roles/nv-static')).data).toMatchObject({ application_object_id: app.objectId, rotation_period: 720 * 3600, metadata: { team: 'nv' } });
    expect((await vault.list('cloud/static-roles')).data.keys).toContain('nv-static');
    const creds = await vault.read('cloud/static-creds/nv-static');
    expect(creds).toMatchObject({ lease_id: '', data: { client_id: app.appId, metadata: { team: 'nv' } } });
    expect(await tokenWorks(full.world, app.appId, creds.data.client_secret)).toBe(true);
    const token = await vault.write('cloud/static-creds/nv-static/token', { scope: `${full.world.emu.graphUrl}/.default` });
    expect((await full.world.emu.tokens.verify(token.data.access_token, 'graph')).ok).toBe(true);
    await vault.write('cloud/rotate-role/nv-static', {});
    await expect(vault.write('cloud/rotate-role/nv-static', {})).rejects.toMatchObject({ response: { statusCode: 409 } });
    await vault.write('cloud/static-roles/nv-static/import', { secret_id: app.keyId, client_secret: app.clientSecret });
    expect((await vault.read('cloud/static-creds/nv-static')).data).toMatchObject({ secret_id: app.keyId, client_secret: app.clientSecret });
    await vault.delete('cloud/static-roles/nv-static');
    await expect(vault.read('cloud/static-roles/nv-static')).rejects.toMatchObject({ response: { statusCode: 404 } });
  });
});

describe('auth/cloud/', () => {
  it('"a login gets the role\'s TTL": a role written with ttl issues tokens of that TTL; node-vault\'s jwtLogin logs in unchanged', async () => {
    const vault = client();
    await vault.write('auth/cloud/config', full.authConfig());
    await vault.addPolicy({ name: 'nv-app', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    await vault.write('auth/cloud/role/nv-ci', { policies: ['nv-app'], ttl: '1h', max_ttl: '2h', bound_service_principal_ids: [full.loginIdentity.principalId] });
    expect((await vault.read('auth/cloud/role/nv-ci')).data).toMatchObject({ token_ttl: 3600, ttl: 3600, token_max_ttl: 7200, token_policies: ['nv-app'] });
    const workload = client('');
    const login = await workload.jwtLogin({ mount_point: 'cloud', role: 'nv-ci', jwt: await full.mintLoginJwt() });
    expect(login.auth).toMatchObject({ policies: ['default', 'nv-app'], lease_duration: 3600, renewable: true, metadata: { role: 'nv-ci', app_id: full.loginIdentity.clientId } });
    expect(workload.token).toBe(login.auth.client_token);
    expect(Object.keys((await workload.mounts()).data)).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'sys/']));
  });
});

describe('ldap/', () => {
  it('"config, static role and its credential, dynamic role and creds, library check-out and check-in" through read, write, list and delete', async () => {
    const vault = client();
    const [user] = ou.users;
    const accounts = ou.serviceAccounts.map((a) => a.name);
    await vault.write('ldap/config', ouConfig(facts, ou));
    const config = (await vault.read('ldap/config')).data;
    expect(config).toMatchObject({ url: facts.url, binddn: ou.engine.dn, userdn: ou.dn });
    expect(config).not.toHaveProperty('bindpass');

    await vault.write('ldap/static-role/nv-app', { username: user.name, rotation_period: '24h' });
    const staticCred = (await vault.read('ldap/static-cred/nv-app')).data;
    expect(staticCred).toMatchObject({ username: user.name, rotation_period: 86400 });
    expect(await canBind(facts.url, user.dn, staticCred.password)).toBe(true);
    expect((await vault.list('ldap/static-role')).data.keys).toContain('nv-app');

    await vault.write('ldap/role/nv-dyn', dynamicRole());
    const dynamic = await vault.read('ldap/creds/nv-dyn');
    expect(dynamic.lease_duration).toBe(3600);
    expect(await canBind(facts.url, dynamic.data.distinguished_names[0], dynamic.data.password)).toBe(true);

    await vault.write('ldap/library/nv-set', { service_account_names: accounts, ttl: '1h', max_ttl: '2h' });
    expect((await vault.read('ldap/library/nv-set')).data).toMatchObject({ service_account_names: accounts, ttl: 3600, max_ttl: 7200 });
    const out = await vault.write('ldap/library/nv-set/check-out', { ttl: '30m' });
    const borrowed = out.data.service_account_name as string;
    const borrowedDn = ou.serviceAccounts.find((a) => a.name === borrowed)!.dn;
    expect(out.lease_duration).toBe(1800);
    expect(await canBind(facts.url, borrowedDn, out.data.password)).toBe(true);
    expect((await vault.read('ldap/library/nv-set/status')).data[borrowed]).toMatchObject({ available: false });
    expect((await vault.write('ldap/library/nv-set/check-in', { service_account_names: [borrowed] })).data).toEqual({ check_ins: [borrowed] });
    expect((await vault.read('ldap/library/nv-set/status')).data[borrowed]).toEqual({ available: true });
    expect(await canBind(facts.url, borrowedDn, out.data.password)).toBe(false);

    await vault.delete('ldap/static-role/nv-app');
    await expect(vault.read('ldap/static-role/nv-app')).rejects.toMatchObject({ response: { statusCode: 404 } });
  });
});
