// The bootstrap's cloud/ mount, auth/cloud method, audit device and prune, applied in-process to real servers: the
// cloud engine and auth method against this file's Azure emulator through the real SDK clients.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { applyBootstrap } from '../../src/bootstrap/apply.ts';
import { parseBootstrap } from '../../src/bootstrap/load.ts';
import { createCloudAuth } from '../../src/auth/cloud/index.ts';
import { cloudSecretsEngine } from '../../src/engines/cloud/index.ts';
import { backendTypes } from '../../src/engines.ts';
import { seedApp } from '../support/azure-emulator/seed.ts';
import { entriesAt, readEntries } from '../support/audit.ts';
import { adminConfig, ENV_NAME, FAST_RETRY, startCloudWorld, subScope, tokenWorks, type CloudWorld } from '../support/cloud-engine.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const RESOURCE = 'https://management.azure.com/';

let world: CloudWorld;
let server: TestServer;
let dir: string;

beforeAll(async () => {
  world = await startCloudWorld();
  dir = mkdtempSync(join(tmpdir(), 'strongroom-bootstrap-mounts-'));
  const env = { CLOUD_ENVIRONMENT_FILEPATH: world.envFile };
  server = await startTestServer({
    backends: {
      secret: { ...backendTypes.secret, cloud: cloudSecretsEngine({ env, retry: FAST_RETRY }) },
      auth: { cloud: createCloudAuth({ envOptions: { env } }) },
      aliases: backendTypes.aliases,
    },
  });
});
afterAll(async () => {
  await server?.close();
  await world?.emu.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The secrets the files reference, as the server's environment would hold them. */
const secrets = () => ({ CLOUD_CLIENT_SECRET: world.tenant.admin.clientSecret });
const load = (file: unknown) => parseBootstrap('f.yaml', stringify(file), { allowTokenIds: true, references: { env: secrets(), readFile: () => Buffer.alloc(0) } });

/** A cloud/ mount (Vault's type name) with its config from the emulator's tenant and one Reader role. */
function cloudMount(path: string) {
  return {
    path, type: 'azure', description: 'service principals for CI',
    config: { ...adminConfig(world), client_secret: '${CLOUD_CLIENT_SECRET}' },
    roles: [{ name: 'reader', cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]), ttl: '1h' }],
  };
}

describe('mounts: a cloud/ engine', () => {
  it('"a bootstrap file applied to a fresh server yields every declared object": its creds are issued and work', async () => {
    const report = await applyBootstrap(server.core, load({ mounts: [cloudMount('ci-cloud')] }));
    expect(report.created.sort()).toEqual(['ci-cloud/', 'ci-cloud/config', 'ci-cloud/roles/reader']);
    expect((await server.request('GET', 'sys/mounts/ci-cloud')).body.data).toMatchObject({ type: 'cloud', description: 'service principals for CI' });

    const creds = await server.request('GET', 'ci-cloud/creds/reader');
    expect(creds.status, JSON.stringify(creds.body)).toBe(200);
    const { client_id, client_secret } = creds.body.data;
    expect(world.emu.state.objectsForAppId(client_id).servicePrincipal).toBeDefined();
    expect(world.emu.state.objectsForAppId(client_id).roleAssignments).toHaveLength(1);
    expect(await tokenWorks(world, client_id, client_secret)).toBe(true);

    // Applying it again writes nothing: no second principal, the config's secret not sent again.
    const again = await applyBootstrap(server.core, load({ mounts: [cloudMount('ci-cloud')] }));
    expect(again).toMatchObject({ created: [], changed: [], removed: [], skipped: [], disabled: [] });
  });
});

describe('auth: a cloud method', () => {
  it('"auth methods, same shape": config and a role, and a workload logs in with a directory-signed JWT', async () => {
    const workload = seedApp(world.emu.state, { displayName: 'ci-runner' });
    const report = await applyBootstrap(server.core, load({
      auth: [{
        path: 'ci-login', type: 'cloud', tune: { default_lease_ttl: '30m' },
        config: { tenant_id: world.emu.tenantId, resource: RESOURCE, environment: ENV_NAME },
        roles: [{ name: 'ci', bound_service_principal_ids: [workload.servicePrincipalId], token_policies: ['ci'] }],
      }],
      policies: { acl: [{ name: 'ci', policy: 'path "ci-cloud/creds/*" { capabilities = ["read"] }' }] },
    }));
    expect(report.created.sort()).toEqual(['auth/ci-login/', 'auth/ci-login/config', 'auth/ci-login/role/ci', 'sys/policies/acl/ci']);

    const jwt = await world.emu.miTokens.mint({ audience: RESOURCE, identity: { principalId: workload.servicePrincipalId, clientId: workload.appId } });
    const login = await server.request('POST', 'auth/ci-login/login', { body: { role: 'ci', jwt }, token: null });
    expect(login.status, JSON.stringify(login.body)).toBe(200);
    expect(login.body.auth).toMatchObject({ policies: ['ci', 'default'], lease_duration: 1800 });
    const other = seedApp(world.emu.state, { displayName: 'someone-else' });
    const refused = await server.request('POST', 'auth/ci-login/login', {
      body: { role: 'ci', jwt: await world.emu.miTokens.mint({ audience: RESOURCE, identity: { principalId: other.servicePrincipalId, clientId: other.appId } }) }, token: null,
    });
    expect(refused.status).toBe(403);
  });
});

describe('audit', () => {
  it('"a file device" declared with the mounts records their requests, and no secret value', async () => {
    const file = join(dir, 'audit.log');
    await applyBootstrap(server.core, load({ audit: [{ path: 'ci-file', type: 'file', options: { file_path: file } }], mounts: [cloudMount('audited-cloud')] }));
    const creds = await server.request('GET', 'audited-cloud/creds/reader');
    expect(creds.status).toBe(200);

    const entries = readEntries(file);
    // The config write came after the device (the order: devices before configs), so it was recorded, hashed.
    expect(entriesAt(entries, 'audited-cloud/config', 'create').map((e) => e.type)).toEqual(['request', 'response']);
    expect(entriesAt(entries, 'audited-cloud/creds/reader', 'read').map((e) => e.type)).toEqual(['request', 'response']);
    const text = readFileSync(file, 'utf8');
    for (const secret of [world.tenant.admin.clientSecret, creds.body.data.client_secret]) expect(text).not.toContain(secret);
    expect((await server.request('GET', 'sys/audit')).body.data['ci-file/']).toMatchObject({ type: 'file', options: { file_path: file } });
  });
});

describe('prune', () => {
  const role = { creation_ldif: 'dn: cn={{.Username}},ou=x\nobjectClass: person\ncn: {{.Username}}\nsn: x\n', deletion_ldif: 'dn: cn={{.Username}},ou=x\nchangetype: delete\n' };
  const declared = (prune: Record<string, unknown> = {}, authPrune?: Record<string, boolean>) => load({
    mounts: [{ path: 'dir', type: 'ldap', dynamic_roles: [{ name: 'keep', ...role }], prune: { dynamic_roles: true } }],
    auth: [{ path: 'ci', type: 'cloud', roles: [{ name: 'keep', bound_service_principal_ids: ['sp-1'] }], ...(authPrune ? { prune: authPrune } : {}) }],
    ...prune,
  });

  it('"objects not in the file are left alone unless prune: true names their kind"; built-ins, root and default never go', async () => {
    const s = await startTestServer();
    try {
      const made = [
        await s.request('POST', 'sys/mounts/dir', { body: { type: 'ldap' } }),
        await s.request('POST', 'dir/role/stray', { body: role }),
        await s.request('POST', 'sys/mounts/extra', { body: { type: 'ldap' } }),
        await s.request('POST', 'sys/auth/ci', { body: { type: 'cloud' } }),
        await s.request('POST', 'auth/ci/role/stray', { body: { bound_service_principal_ids: 'sp-2' } }),
        await s.request('POST', 'sys/auth/extra-auth', { body: { type: 'cloud' } }),
        await s.request('POST', 'sys/policies/acl/stray', { body: { policy: 'path "x" { capabilities = ["read"] }' } }),
      ];
      expect(made.filter((r) => r.status >= 300)).toEqual([]);

      // Only dir's dynamic roles are pruned: the auth method's roles, mounts and auth methods are not named.
      const first = await applyBootstrap(s.core, declared());
      expect(first.removed).toEqual(['dir/role/stray']);
      expect((await s.request('LIST', 'dir/role')).body.data.keys).toEqual(['keep']);
      expect((await s.request('LIST', 'auth/ci/role')).body.data.keys.sort()).toEqual(['keep', 'stray']);
      expect(Object.keys((await s.request('GET', 'sys/mounts')).body.data)).toContain('extra/');

      const second = await applyBootstrap(s.core, declared({ prune: { mounts: true, auth: true }, policies: { prune: { acl: true } } }, { roles: true }));
      expect(second.removed.sort()).toEqual(['auth/ci/role/stray', 'auth/cloud/', 'auth/extra-auth/', 'cloud/', 'extra/', 'ldap/', 'sys/policies/acl/stray']);
      expect(Object.keys((await s.request('GET', 'sys/mounts')).body.data).sort()).toEqual(['dir/', 'identity/', 'sys/']);
      expect(Object.keys((await s.request('GET', 'sys/auth')).body.data).sort()).toEqual(['ci/', 'token/']);
      expect((await s.request('LIST', 'sys/policies/acl')).body.data.keys.sort()).toEqual(['default', 'root']);
      expect((await s.request('LIST', 'auth/ci/role')).body.data.keys).toEqual(['keep']);
      // The root token still works: the token store was never a candidate.
      expect((await s.request('GET', 'auth/token/lookup-self')).status).toBe(200);
    } finally {
      await s.close();
    }
  });
});
