// A real third-party Vault client, hvac 0.11 (Debian's python3-hvac), drives every mount of a listening server
// as a new user would: hvac's own methods where it has them, its generic read/write/list/delete where it has
// none (the ldap engine, rotate-root, auth/cloud/config). Each test runs one Python script; what the script
// prints is asserted here, and what the server made is checked against slapd and the Azure emulator.
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { ENV_NAME, tokenWorks } from '../support/cloud-engine.ts';
import { startFullServer, type FullServer } from '../support/full-server.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { HVAC_PRELUDE, findPython, pythonScripts, type PythonScripts } from '../support/python.ts';
import { canBind, createIsolatedOu, readEntry, type IsolatedOu } from '../support/slapd.ts';

const INSTALL = 'python3-hvac is not installed; install it with "apt-get install python3-hvac" (Debian/Ubuntu; .ci/run does)';
const python = await findPython('hvac');
if (!python) console.warn(`hvac client tests skipped: ${INSTALL}`);


const facts = inject('slapd');

describe.skipIf(!python)(python ? 'hvac 0.11' : `hvac 0.11: skipped, ${INSTALL}`, () => {
  let full: FullServer;
  let ou: IsolatedOu;
  let py: PythonScripts;
  const run = <T = any>(script: string, input: Record<string, unknown> = {}) => py.run<T>(script, { url: full.server.url, token: 'root', ...input });

  beforeAll(async () => {
    // The server takes the cloud environment from its own settings, so hvac's secrets.azure.configure (which
    // accepts only Azure's public environment names) configures it unchanged.
    process.env.CLOUD_ENVIRONMENT = ENV_NAME;
    full = await startFullServer({ listen: true });
    ou = await createIsolatedOu(facts, { users: 1, serviceAccounts: 2 });
    py = await pythonScripts(python!, HVAC_PRELUDE);
  });
  afterAll(async () => {
    await full?.server.core.leases.idle();
    await full?.close();
    await ou?.cleanup();
    await py?.close();
    delete process.env.CLOUD_ENVIRONMENT;
  });

  const dynamicRole = () => ({
    creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: hvac\nuserPassword: {{.Password}}\n`,
    deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
    default_ttl: '1h',
    max_ttl: '2h',
  });

  describe('sys/mounts and sys/auth', () => {
    it('"enable, list, tune, move, disable": a secrets engine and an auth method through hvac\'s sys methods (the UI listing through read)', async () => {
      const out = await run(`
out = {}
client.sys.enable_secrets_engine("ldap", path="ldap-hvac", description="by hvac", config={"default_lease_ttl": "1h", "max_lease_ttl": "4h"})
out["listed"] = client.sys.list_mounted_secrets_engines()["data"]["ldap-hvac/"]
client.sys.tune_mount_configuration("ldap-hvac", default_lease_ttl="30m", max_lease_ttl="2h", description="tuned by hvac")
out["tuned"] = client.sys.read_mount_configuration("ldap-hvac")["data"]
client.write("ldap-hvac/config", **ctx["config"])
migration = client.sys.move_backend("ldap-hvac", "ldap-moved")["data"]["migration_id"]
out["remount_status"] = client.read("sys/remount/status/" + migration)["data"]["migration_info"]
mounts = client.sys.list_mounted_secrets_engines()["data"]
out["moved"] = {"from_listed": "ldap-hvac/" in mounts, "to": mounts["ldap-moved/"], "config": client.read("ldap-moved/config")["data"]}
out["ui_mounts"] = sorted(client.read("sys/internal/ui/mounts")["data"]["secret"])
out["ui_mount"] = client.read("sys/internal/ui/mounts/ldap-moved/static-role/app")["data"]
client.sys.disable_secrets_engine("ldap-moved")
out["mounted_after_disable"] = "ldap-moved/" in client.sys.list_mounted_secrets_engines()["data"]
client.sys.enable_auth_method("cloud", path="cloud-hvac", description="auth by hvac")
out["auth_listed"] = client.sys.list_auth_methods()["data"]["cloud-hvac/"]
client.sys.disable_auth_method("cloud-hvac")
out["auth_after_disable"] = "cloud-hvac/" in client.sys.list_auth_methods()["data"]
emit(out)
`, { config: ouConfig(facts, ou) });
      expect(out.listed).toMatchObject({ type: 'ldap', description: 'by hvac', config: { default_lease_ttl: 3600, max_lease_ttl: 14400 } });
      expect(out.tuned).toMatchObject({ default_lease_ttl: 1800, max_lease_ttl: 7200, description: 'tuned by hvac' });
      expect(out.remount_status).toMatchObject({ source_mount: 'ldap-hvac/', target_mount: 'ldap-moved/', status: 'success' });
      expect(out.moved).toMatchObject({ from_listed: false, to: { type: 'ldap', description: 'tuned by hvac' }, config: { url: facts.url, binddn: ou.engine.dn } });
      expect(out.ui_mounts).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'ldap-moved/']));
      expect(out.ui_mount).toMatchObject({ path: 'ldap-moved/', type: 'ldap' });
      expect(out.mounted_after_disable).toBe(false);
      expect(out.auth_listed).toMatchObject({ type: 'cloud', description: 'auth by hvac' });
      expect(out.auth_after_disable).toBe(false);
    });

    it('"Vault\'s type names": enable_secrets_engine("azure") and ("openldap"), enable_auth_method("azure") mount cloud and ldap', async () => {
      const out = await run(`
client.sys.enable_secrets_engine("azure", path="az-hvac")
client.sys.enable_secrets_engine("openldap", path="ol-hvac")
client.sys.enable_auth_method("azure", path="az-hvac")
mounts = client.sys.list_mounted_secrets_engines()["data"]
auths = client.sys.list_auth_methods()["data"]
emit({"az": mounts["az-hvac/"]["type"], "ol": mounts["ol-hvac/"]["type"], "auth": auths["az-hvac/"]["type"]})
client.sys.disable_secrets_engine("az-hvac")
client.sys.disable_secrets_engine("ol-hvac")
client.sys.disable_auth_method("az-hvac")
`);
      expect(out).toEqual({ az: 'cloud', ol: 'ldap', auth: 'cloud' });
    });
  });

  describe('sys/policy', () => {
    it('"create, read, list, delete" an ACL policy through hvac\'s sys methods', async () => {
      const out = await run(`
client.sys.create_or_update_policy("hvac-reader", 'path "sys/mounts" { capabilities = ["read"] }')
out = {"read": client.sys.read_policy("hvac-reader")["data"], "listed": client.sys.list_policies()["data"]["policies"]}
client.sys.delete_policy("hvac-reader")
out["after_delete"] = client.sys.list_policies()["data"]["policies"]
emit(out)
`);
      expect(out.read).toMatchObject({ name: 'hvac-reader', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
      expect(out.listed).toContain('hvac-reader');
      expect(out.after_delete).not.toContain('hvac-reader');
    });
  });

  describe('sys/health, sys/init and sys/capabilities', () => {
    it('"health answers initialised, unsealed and active in Vault\'s shape"; "init says initialised"', async () => {
      const out = await run(`emit({"health": client.sys.read_health_status(method="GET"), "initialized": client.sys.is_initialized()})`);
      expect(out.health).toMatchObject({ initialized: true, sealed: false, standby: false, cluster_id: expect.any(String), version: expect.any(String) });
      expect(out.initialized).toBe(true);
    });

    it('"capabilities answers a token\'s capabilities per path": the caller\'s (capabilities-self), another token\'s, and by accessor', async () => {
      const out = await run(`
client.sys.create_or_update_policy("caps", 'path "sys/mounts" { capabilities = ["read"] }\\npath "ldap/static-cred/*" { capabilities = ["read", "list"] }')
created = client.auth.token.create(policies=["caps"], ttl="10m")["auth"]
paths = ["sys/mounts", "ldap/static-cred/app", "ldap/config"]
emit({
    "self": as_client(created["client_token"]).sys.get_capabilities(paths=paths)["data"],
    "token": client.sys.get_capabilities(paths=paths, token=created["client_token"])["data"],
    "accessor": client.sys.get_capabilities(paths=paths, accessor=created["accessor"])["data"],
    "authenticated": as_client(created["client_token"]).is_authenticated(),
})
`);
      for (const answer of ['self', 'token', 'accessor']) {
        expect(out[answer], answer).toMatchObject({ 'sys/mounts': ['read'], 'ldap/static-cred/app': ['list', 'read'], 'ldap/config': ['deny'] });
      }
      expect(out.authenticated).toBe(true);
    });
  });

  describe('auth/token', () => {
    it('"create, lookup, renew, revoke": hvac\'s create_token (null for every unset option) and auth.token methods', async () => {
      const out = await run(`
legacy = client.create_token(policies=["default"], ttl="1h")["auth"]
created = client.auth.token.create(policies=["default"], ttl="1h", meta={"team": "hvac"})["auth"]
token = created["client_token"]
looked_up = client.auth.token.lookup(token)["data"]
renewed = client.auth.token.renew(token, increment="2h")["auth"]
client.auth.token.revoke(token)
emit({
    "legacy": {"policies": legacy["policies"], "lease_duration": legacy["lease_duration"], "renewable": legacy["renewable"]},
    "created": {"policies": created["policies"], "lease_duration": created["lease_duration"], "metadata": created["metadata"]},
    "looked_up": {k: looked_up[k] for k in ("policies", "meta", "creation_ttl", "renewable", "num_uses")},
    "renewed": renewed["lease_duration"],
    "after_revoke": refusal(lambda: client.auth.token.lookup(token)),
})
`);
      expect(out.legacy).toEqual({ policies: ['default'], lease_duration: 3600, renewable: true });
      expect(out.created).toEqual({ policies: ['default'], lease_duration: 3600, metadata: { team: 'hvac' } });
      expect(out.looked_up).toEqual({ policies: ['default'], meta: { team: 'hvac' }, creation_ttl: 3600, renewable: true, num_uses: 0 });
      expect(out.renewed).toBe(7200);
      expect(out.after_revoke).toBe('Forbidden');
    });

  });

  describe('auth/token/roles', () => {
    it('"create, read, list, delete a token role and create tokens against it": hvac\'s auth.token role methods and the older create_token_role (null for every option left out)', async () => {
      const out = await run(`
client.sys.create_or_update_policy("hvac-role-policy", 'path "sys/mounts" { capabilities = ["read"] }')
client.create_token_role("hvac-periodic", allowed_policies=["hvac-role-policy"], period="1h")
client.auth.token.create_or_update_role("hvac-role", allowed_policies=["hvac-role-policy"], orphan=True, path_suffix="v1")
created = client.auth.token.create(role_name="hvac-role")["auth"]
periodic = client.create_token(role="hvac-periodic")["auth"]
out = {
    "periodic_role": client.auth.token.read_role("hvac-periodic")["data"],
    "role": client.auth.token.read_role("hvac-role")["data"],
    "roles": client.auth.token.list_roles()["data"]["keys"],
    "created": {k: created[k] for k in ("policies", "orphan")},
    "looked_up": {k: client.auth.token.lookup(created["client_token"])["data"][k] for k in ("path", "orphan")},
    "periodic": {"policies": periodic["policies"], "lease_duration": periodic["lease_duration"]},
    "periodic_period": client.auth.token.lookup(periodic["client_token"])["data"]["period"],
}
client.auth.token.delete_role("hvac-role")
out["after_delete"] = refusal(lambda: client.auth.token.read_role("hvac-role"))
emit(out)
`);
      expect(out.periodic_role).toMatchObject({ allowed_policies: ['hvac-role-policy'], token_period: 3600, orphan: false, renewable: true, path_suffix: '' });
      expect(out.role).toMatchObject({ name: 'hvac-role', allowed_policies: ['hvac-role-policy'], orphan: true, path_suffix: 'v1' });
      expect(out.roles).toEqual(expect.arrayContaining(['hvac-periodic', 'hvac-role']));
      expect(out.created).toEqual({ policies: ['default', 'hvac-role-policy'], orphan: true });
      expect(out.looked_up).toEqual({ path: 'auth/token/create/hvac-role/v1', orphan: true });
      expect(out.periodic).toEqual({ policies: ['default', 'hvac-role-policy'], lease_duration: 3600 });
      expect(out.periodic_period).toBe(3600);
      expect(out.after_delete).toBe('InvalidPath');
    });
  });

  describe('sys/leases', () => {
    it('"lookup, renew, revoke" the lease of LDAP dynamic credentials; revoking it deletes the account', async () => {
      const out = await run(`
client.write("ldap/config", **ctx["config"])
client.write("ldap/role/hvac-lease", **ctx["role"])
creds = client.read("ldap/creds/hvac-lease")
lease_id = creds["lease_id"]
looked_up = client.sys.read_lease(lease_id)["data"]
renewed = client.sys.renew_lease(lease_id, increment=600)
client.sys.revoke_lease(lease_id)
emit({
    "creds": creds["data"], "lease_id": lease_id, "lease_duration": creds["lease_duration"],
    "looked_up": {k: looked_up[k] for k in ("id", "renewable")}, "ttl": looked_up["ttl"],
    "renewed": {"lease_id": renewed["lease_id"], "lease_duration": renewed["lease_duration"]},
    "after_revoke": refusal(lambda: client.sys.read_lease(lease_id)),
})
`, { config: ouConfig(facts, ou), role: dynamicRole() });
      expect(out.lease_id).toMatch(/^ldap\/creds\/hvac-lease\//);
      expect(out.lease_duration).toBe(3600);
      expect(out.looked_up).toEqual({ id: out.lease_id, renewable: true });
      expect(out.ttl).toBeGreaterThan(3500);
      expect(out.renewed).toEqual({ lease_id: out.lease_id, lease_duration: 600 });
      expect(out.after_revoke).toBe('InvalidRequest');
      await full.server.core.leases.idle();
      expect(await readEntry(facts, out.creds.distinguished_names[0])).toBeUndefined();
    });
  });

  describe('cloud/', () => {
    it('"config, a role with azure_roles, creds, rotate-root" through hvac\'s secrets.azure methods (rotate-root through write)', async () => {
      const config = full.cloudConfig();
      const out = await run(`
c = ctx["config"]
client.secrets.azure.configure(c["subscription_id"], c["tenant_id"], client_id=c["client_id"], client_secret=c["client_secret"], mount_point="cloud")
client.secrets.azure.create_or_update_role("hvac-reader", [{"role_name": "Reader", "scope": ctx["scope"]}], ttl="1h", mount_point="cloud")
role = client.read("cloud/roles/hvac-reader")["data"]
listed = client.secrets.azure.list_roles(mount_point="cloud")["keys"]
creds = client.secrets.azure.generate_credentials("hvac-reader", mount_point="cloud")
rotated = client.write("cloud/rotate-root")
emit({
    "config": client.secrets.azure.read_config(mount_point="cloud"),
    "role": role, "listed": listed, "creds": creds,
    "rotated_status": getattr(rotated, "status_code", 200),
    "after_rotate": client.secrets.azure.generate_credentials("hvac-reader", mount_point="cloud"),
})
`, { config, scope: `/subscriptions/${full.world.tenant.subscriptionId}` });
      expect(out.config).toMatchObject({ subscription_id: config.subscription_id, tenant_id: config.tenant_id, client_id: config.client_id });
      expect(out.config).not.toHaveProperty('client_secret');
      expect(out.role).toMatchObject({ ttl: 3600, cloud_roles: [expect.objectContaining({ role_name: 'Reader', scope: `/subscriptions/${full.world.tenant.subscriptionId}` })] });
      expect(out.listed).toContain('hvac-reader');
      expect(await tokenWorks(full.world, out.creds.client_id, out.creds.client_secret)).toBe(true);
      expect(out.rotated_status).toBeLessThan(300);
      expect(out.config.root_password_expiration_date).toMatch(/^\d{4}-\d\d-\d\dT/);
      expect(await tokenWorks(full.world, config.client_id as string, config.client_secret as string)).toBe(false);
      expect(await tokenWorks(full.world, out.after_rotate.client_id, out.after_rotate.client_secret)).toBe(true);
    });

    it('"static roles" through hvac\'s generic read, write and list: static-roles, static-creds, /token, rotate-role, import', async () => {
      const app = seedApp(full.world.emu.state, { displayName: 'hvac-static' });
      const out = await run(`
# The test above may have rotated the root secret: the config is written only when there is none.
if not client.read("cloud/config"):
    client.write("cloud/config", **ctx["config"])
client.write("cloud/static-roles/hvac-static", application_object_id=ctx["app"], rotation_period="720h", skip_import_rotation=True)
before = refusal(lambda: client.read("cloud/static-creds/hvac-static"))
rotated = client.write("cloud/rotate-role/hvac-static")
client.write("cloud/rotate-role/hvac-static")
second = refusal(lambda: client.write("cloud/rotate-role/hvac-static"))
creds = client.read("cloud/static-creds/hvac-static")
token = client.write("cloud/static-creds/hvac-static/token", scope=ctx["scope"])["data"]
client.write("cloud/static-roles/hvac-static/import", secret_id=ctx["key_id"], client_secret=ctx["secret"])
emit({
    "role": client.read("cloud/static-roles/hvac-static")["data"],
    "listed": client.list("cloud/static-roles")["data"]["keys"],
    "before": before, "rotated_status": getattr(rotated, "status_code", 200), "second": second,
    "creds": creds["data"], "lease_id": creds["lease_id"], "token": token["access_token"],
    "imported": client.read("cloud/static-creds/hvac-static")["data"]["secret_id"],
})
`, { config: full.cloudConfig(), app: app.objectId, scope: `${full.world.emu.graphUrl}/.default`, key_id: app.keyId, secret: app.clientSecret });
      expect(out.before).toBe('InvalidRequest');
      expect(out.rotated_status).toBeLessThan(300);
      // 409 inside the first manual rotation's grace period: hvac 0.11 has no class of its own for it.
      expect(out.second).toBe('UnexpectedError');
      expect(out.role).toMatchObject({ application_object_id: app.objectId, rotation_period: 720 * 3600, defer_initial_creds: true, secret_id: app.keyId });
      expect(out.listed).toContain('hvac-static');
      expect(out.lease_id).toBe('');
      expect(await tokenWorks(full.world, app.appId, out.creds.client_secret)).toBe(true);
      expect((await full.world.emu.tokens.verify(out.token, 'graph')).ok).toBe(true);
      expect(out.imported).toBe(app.keyId);
    });
  });

  describe('auth/cloud/', () => {
    it('"a login gets the role\'s TTL": a role made with hvac\'s auth.azure.create_role(ttl=...) issues tokens of that TTL', async () => {
      const out = await run(`
client.write("auth/cloud/config", **ctx["config"])
client.sys.create_or_update_policy("hvac-app", 'path "sys/mounts" { capabilities = ["read"] }')
client.auth.azure.create_role("hvac-ci", policies=["hvac-app"], ttl="1h", max_ttl="2h", bound_service_principal_ids=[ctx["principal"]], mount_point="cloud")
role = client.auth.azure.read_role("hvac-ci", mount_point="cloud")
login = as_client("").auth.azure.login("hvac-ci", ctx["jwt"], mount_point="cloud")["auth"]
emit({
    "config": client.auth.azure.read_config(mount_point="cloud"),
    "role": role, "roles": client.auth.azure.list_roles(mount_point="cloud")["keys"],
    "login": {k: login[k] for k in ("policies", "lease_duration", "renewable", "metadata")},
    "mounts_as_login": sorted(as_client(login["client_token"]).sys.list_mounted_secrets_engines()["data"]),
})
`, { config: full.authConfig(), principal: full.loginIdentity.principalId, jwt: await full.mintLoginJwt() });
      expect(out.config).toMatchObject({ tenant_id: full.world.emu.tenantId, environment: ENV_NAME });
      expect(out.role).toMatchObject({ token_ttl: 3600, ttl: 3600, token_max_ttl: 7200, max_ttl: 7200, token_policies: ['hvac-app'], policies: ['hvac-app'] });
      expect(out.roles).toContain('hvac-ci');
      expect(out.login).toEqual({ policies: ['default', 'hvac-app'], lease_duration: 3600, renewable: true, metadata: { role: 'hvac-ci', app_id: full.loginIdentity.clientId } });
      expect(out.mounts_as_login).toEqual(expect.arrayContaining(['cloud/', 'ldap/', 'sys/']));
    });
  });

  describe('ldap/', () => {
    it('"config, static role and its credential, dynamic role and creds, library check-out and check-in" through hvac\'s generic read/write/list/delete', async () => {
      const [user] = ou.users;
      const accounts = ou.serviceAccounts.map((a) => a.name);
      const out = await run(`
client.write("ldap/config", **ctx["config"])
client.write("ldap/static-role/hvac-app", username=ctx["user"], rotation_period="24h")
client.write("ldap/role/hvac-dyn", **ctx["role"])
dynamic = client.read("ldap/creds/hvac-dyn")
client.write("ldap/library/hvac-set", service_account_names=ctx["accounts"], ttl="1h", max_ttl="2h")
checked_out = client.write("ldap/library/hvac-set/check-out", ttl="30m")
emit({
    "config": client.read("ldap/config")["data"],
    "static_cred": client.read("ldap/static-cred/hvac-app")["data"],
    "static_roles": client.list("ldap/static-role")["data"]["keys"],
    "dynamic": {"data": dynamic["data"], "lease_duration": dynamic["lease_duration"], "lease_id": dynamic["lease_id"]},
    "library": client.read("ldap/library/hvac-set")["data"],
    "checked_out": {"data": checked_out["data"], "lease_duration": checked_out["lease_duration"]},
    "status": client.read("ldap/library/hvac-set/status")["data"],
})
`, { config: ouConfig(facts, ou), user: user.name, role: dynamicRole(), accounts });
      expect(out.config).toMatchObject({ url: facts.url, binddn: ou.engine.dn, userdn: ou.dn });
      expect(out.config).not.toHaveProperty('bindpass');
      expect(out.static_cred).toMatchObject({ username: user.name, rotation_period: 86400 });
      expect(await canBind(facts.url, user.dn, out.static_cred.password)).toBe(true);
      expect(out.static_roles).toContain('hvac-app');
      expect(out.dynamic.lease_duration).toBe(3600);
      expect(out.dynamic.lease_id).toMatch(/^ldap\/creds\/hvac-dyn\//);
      expect(await canBind(facts.url, out.dynamic.data.distinguished_names[0], out.dynamic.data.password)).toBe(true);
      expect(out.library).toMatchObject({ service_account_names: accounts, ttl: 3600, max_ttl: 7200 });
      const borrowed = out.checked_out.data.service_account_name as string;
      const borrowedDn = ou.serviceAccounts.find((a) => a.name === borrowed)!.dn;
      expect(out.checked_out.lease_duration).toBe(1800);
      expect(await canBind(facts.url, borrowedDn, out.checked_out.data.password)).toBe(true);
      expect(out.status[borrowed]).toMatchObject({ available: false });

      const back = await run(`
checked_in = client.write("ldap/library/hvac-set/check-in", service_account_names=[ctx["borrowed"]])["data"]
status = client.read("ldap/library/hvac-set/status")["data"]
client.delete("ldap/static-role/hvac-app")
emit({"checked_in": checked_in, "status": status, "static_after_delete": client.read("ldap/static-role/hvac-app")})
`, { borrowed });
      expect(back.checked_in).toEqual({ check_ins: [borrowed] });
      expect(back.status[borrowed]).toEqual({ available: true });
      expect(await canBind(facts.url, borrowedDn, out.checked_out.data.password)).toBe(false);
      expect(back.static_after_delete).toBeNull();
    });
  });
});

