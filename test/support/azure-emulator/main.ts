// `npm run emulator`: a long-running emulator for trying the cloud mounts locally (README "Cloud secrets engine" and
// "Cloud auth method" run it). Generates a CA into a directory, starts login/Graph/ARM on consecutive ports, seeds a
// tenant with an application for Strongroom and a VM with a managed identity whose IMDS endpoint it serves, writes
// what a client shell needs into <dir>/tenant.env (last: its presence means ready) and prints the README's commands.
import { rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { generateTls } from './ca.ts';
import { IMDS_TOKEN_PATH, registerImds, type ImdsHost } from './imds.ts';
import { seedApp, seedTenant } from './seed.ts';
import { startEmulator } from './server.ts';

/** The audience a workload asks IMDS for and auth/cloud/config expects, as in Azure. */
const LOGIN_RESOURCE = 'https://management.azure.com/';
const VM = { name: 'web01', resourceGroup: 'web-rg' };

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.EMULATOR_PORT ?? '8443' },
    dir: { type: 'string', default: process.env.EMULATOR_DIR ?? '.azure-emulator' },
    'page-size': { type: 'string', default: '100' },
    'replication-delay-ms': { type: 'string', default: '0' },
    help: { type: 'boolean', default: false },
  },
});

if (values.help) {
  console.log('usage: npm run emulator -- [--port 8443] [--dir .azure-emulator] [--page-size 100] [--replication-delay-ms 0]\n'
    + 'Serves login (and IMDS) on --port, Graph on --port+1, ARM on --port+2 (127.0.0.1); --port 0 lets the system pick\n'
    + 'each (printed, and in environment.json). The defaults come from EMULATOR_PORT and EMULATOR_DIR when set. The\n'
    + 'directory holds the CA key: keep it out of version control.');
  process.exit(0);
}

const port = Number.parseInt(values.port, 10);
const dir = resolve(values.dir);
const tls = await generateTls(dir, { days: 30 });
let imdsHost: ImdsHost | undefined;
const emulator = await startEmulator({
  tlsCertPath: tls.certPath,
  tlsKeyPath: tls.keyPath,
  // Port 0: each service binds one the system picks, so nothing can take it between a pick and the listen (a port
  // picked free beforehand, or the one after it, can meanwhile become another process's listener or connection).
  ports: port === 0 ? {} : { login: port, graph: port + 1, arm: port + 2 },
  pageSize: Number.parseInt(values['page-size'], 10),
  extraResources: [{ uri: LOGIN_RESOURCE, service: 'arm' }],
  extensions: [(routers) => registerImds(routers.login, () => imdsHost)],
});
const delay = Number.parseInt(values['replication-delay-ms'], 10);
emulator.faults.replicationDelay({ servicePrincipalToArm: delay, servicePrincipalToGroups: delay });
const tenant = seedTenant(emulator.state, { groups: ['strongroom-readers', 'strongroom-writers'] });
// An existing application of "your directory" for the README's cloud static role.
const billing = seedApp(emulator.state, { displayName: 'billing' });
for (const roleName of ['Strongroom Custom Reader']) emulator.state.addRoleDefinition({ roleName, actions: ['*/read'] });
const vm = emulator.compute.addVirtualMachine({ subscriptionId: tenant.subscriptionId, ...VM });
imdsHost = { vm, miTokens: emulator.miTokens, tokens: emulator.tokens, state: emulator.state };
const environment = emulator.environment();
await writeFile(join(dir, 'environment.json'), `${JSON.stringify(environment, null, 2)}\n`);

// Not exported: a shell that sources it passes none of it to a server it starts (CLOUD_* would override stored config).
const tenantEnv = {
  EMULATOR_TENANT_ID: emulator.tenantId,
  EMULATOR_SUBSCRIPTION_ID: tenant.subscriptionId,
  EMULATOR_CLIENT_ID: tenant.admin.appId,
  EMULATOR_CLIENT_SECRET: tenant.admin.clientSecret,
  EMULATOR_ENVIRONMENT: environment.name,
  EMULATOR_IMDS: `${emulator.url}${IMDS_TOKEN_PATH}`,
  EMULATOR_APP_OBJECT_ID: billing.objectId,
};
const envPath = join(dir, 'tenant.env');
await writeFile(`${envPath}.tmp`, Object.entries(tenantEnv).map(([k, v]) => `${k}='${v.replaceAll("'", "'\\''")}'\n`).join(''), { mode: 0o600 });
await rename(`${envPath}.tmp`, envPath);

const header = '-H "X-Service-Token: $VAULT_TOKEN"';
console.log(`Azure emulator for tenant ${emulator.tenantId}
  login ${emulator.url}   graph ${emulator.graphUrl}   arm ${emulator.armUrl}
  application strongroom-admin (Owner of subscription ${tenant.subscriptionId}), application billing; groups ${Object.keys(tenant.groups).join(', ')}
  virtual machine ${VM.name} in resource group ${VM.resourceGroup}, with a system-assigned managed identity; IMDS ${tenantEnv.EMULATOR_IMDS}

# in the shell that starts Strongroom (Node reads NODE_EXTRA_CA_CERTS only at start), then the README's walkthrough:
export EMULATOR_DIR=${dir}
export NODE_EXTRA_CA_CERTS=$EMULATOR_DIR/ca.crt CLOUD_ENVIRONMENT_FILEPATH=$EMULATOR_DIR/environment.json
. $EMULATOR_DIR/tenant.env

# log in through auth/cloud/ as the VM (README "Cloud auth method"):
curl -sS --fail-with-body ${header} -X POST $VAULT_ADDR/v1/auth/cloud/config -d @- <<JSON
{"tenant_id": "$EMULATOR_TENANT_ID", "resource": "${LOGIN_RESOURCE}", "environment": "$EMULATOR_ENVIRONMENT",
 "client_id": "$EMULATOR_CLIENT_ID", "client_secret": "$EMULATOR_CLIENT_SECRET"}
JSON
curl -sS --fail-with-body ${header} -X POST $VAULT_ADDR/v1/auth/cloud/role/web -d @- <<JSON
{"policies": ["app"], "bound_subscription_ids": ["$EMULATOR_SUBSCRIPTION_ID"], "bound_resource_groups": ["${VM.resourceGroup}"], "token_ttl": "1h"}
JSON
# on the VM: a managed-identity token from IMDS (Azure's is http://169.254.169.254${IMDS_TOKEN_PATH}), then a login
JWT=$(curl -sS --fail-with-body --cacert $NODE_EXTRA_CA_CERTS -H Metadata:true \\
  "$EMULATOR_IMDS?api-version=2018-02-01&resource=${LOGIN_RESOURCE}" | jq -r .access_token)
curl -sS --fail-with-body -X POST $VAULT_ADDR/v1/auth/cloud/login -d @- <<JSON | jq .auth
{"role": "web", "jwt": "$JWT", "subscription_id": "$EMULATOR_SUBSCRIPTION_ID", "resource_group_name": "${VM.resourceGroup}", "vm_name": "${VM.name}"}
JSON

Ctrl-C to stop.`);

let stopping = false;
const stop = async (): Promise<void> => {
  if (stopping) return;
  stopping = true;
  await emulator.close();
  process.exit(0);
};
// `on`, not `once`, as in src/main.ts: a second signal while closing must not kill the process by its default action.
process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());
