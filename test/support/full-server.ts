// One server with every mount the build registers (ldap/, cloud/, auth/cloud/), as an operator runs it: the
// production backend registry, the Azure mounts pointed at this file's emulator through
// CLOUD_ENVIRONMENT_FILEPATH in the process environment. For tests that drive all of it through one client.
import { seedApp } from './azure-emulator/seed.ts';
import { ENV_NAME, adminConfig, startCloudWorld, subScope, type CloudWorld } from './cloud-engine.ts';
import { startTestServer, type TestServer } from './server.ts';

/** The audience login JWTs are minted for and auth/cloud/config expects. */
export const LOGIN_RESOURCE = 'https://management.azure.com/';

export interface FullServer {
  server: TestServer;
  world: CloudWorld;
  /** The managed identity that logs in through auth/cloud/ (bind roles to its principalId). */
  loginIdentity: { principalId: string; clientId: string };
  /** A fresh managed-identity access token of loginIdentity for LOGIN_RESOURCE. */
  mintLoginJwt(): Promise<string>;
  /** A working cloud/config body (the tenant's admin application). */
  cloudConfig(): Record<string, unknown>;
  /** A working auth/cloud/config body. */
  authConfig(): Record<string, unknown>;
  /** A working cloud role's `cloud_roles` value (Reader on the subscription), as the JSON string clients send. */
  readerRoles(): string;
  close(): Promise<void>;
}

export async function startFullServer(opts: { listen?: boolean; env?: Record<string, string> } = {}): Promise<FullServer> {
  const world = await startCloudWorld();
  process.env.CLOUD_ENVIRONMENT_FILEPATH = world.envFile;
  const app = seedApp(world.emu.state, { displayName: 'logs-in' });
  const loginIdentity = { principalId: app.servicePrincipalId, clientId: app.appId };
  const server = await startTestServer({ listen: opts.listen, env: opts.env });
  return {
    server,
    world,
    loginIdentity,
    mintLoginJwt: () => world.emu.miTokens.mint({ identity: loginIdentity, audience: LOGIN_RESOURCE }),
    cloudConfig: () => adminConfig(world),
    authConfig: () => ({ tenant_id: world.emu.tenantId, resource: LOGIN_RESOURCE, environment: ENV_NAME }),
    readerRoles: () => JSON.stringify([{ role_name: 'Reader', scope: subScope(world) }]),
    async close() {
      await server.close();
      await world.emu.close();
    },
  };
}
