// `npm run emulator`: a long-running emulator for trying the engine locally. Generates a CA into a
// directory, starts login/Graph/ARM on consecutive ports, seeds a tenant and prints what to export.
import { writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { generateTls } from './ca.ts';
import { seedTenant } from './seed.ts';
import { startEmulator } from './server.ts';

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
    + 'Serves login on --port, Graph on --port+1, ARM on --port+2 (127.0.0.1).');
  process.exit(0);
}

const port = Number.parseInt(values.port, 10);
const dir = resolve(values.dir);
const tls = await generateTls(dir, { days: 30 });
const emulator = await startEmulator({
  tlsCertPath: tls.certPath,
  tlsKeyPath: tls.keyPath,
  ports: { login: port, graph: port + 1, arm: port + 2 },
  pageSize: Number.parseInt(values['page-size'], 10),
});
const delay = Number.parseInt(values['replication-delay-ms'], 10);
emulator.faults.replicationDelay({ servicePrincipalToArm: delay, servicePrincipalToGroups: delay });
const tenant = seedTenant(emulator.state, { groups: ['strongroom-readers', 'strongroom-writers'] });
for (const roleName of ['Strongroom Custom Reader']) emulator.state.addRoleDefinition({ roleName, actions: ['*/read'] });
const environment = emulator.environment();
const envFile = join(dir, 'environment.json');
await writeFile(envFile, `${JSON.stringify(environment, null, 2)}\n`);

console.log(`Azure emulator for tenant ${emulator.tenantId}
  login ${emulator.url}   graph ${emulator.graphUrl}   arm ${emulator.armUrl}

# in the shell that runs Strongroom (Node reads NODE_EXTRA_CA_CERTS only at start):
export NODE_EXTRA_CA_CERTS=${tls.caCertPath}
export CLOUD_ENVIRONMENT_FILEPATH=${envFile}     # ${JSON.stringify(environment)}
export CLOUD_ENVIRONMENT=${environment.name}
export CLOUD_TENANT_ID=${emulator.tenantId}
export CLOUD_SUBSCRIPTION_ID=${tenant.subscriptionId}
export CLOUD_CLIENT_ID=${tenant.admin.appId}
export CLOUD_CLIENT_SECRET='${tenant.admin.clientSecret}'

groups: ${Object.entries(tenant.groups).map(([n, id]) => `${n}=${id}`).join('  ')}
roles: Owner, Contributor, Reader, User Access Administrator, Storage Blob Data Owner, Strongroom Custom Reader
managed identity endpoint: IDENTITY_ENDPOINT=${emulator.managedIdentity.endpoint} IDENTITY_HEADER=${emulator.managedIdentity.header}
Ctrl-C to stop.`);

const stop = async (): Promise<void> => {
  await emulator.close();
  process.exit(0);
};
process.once('SIGINT', () => void stop());
process.once('SIGTERM', () => void stop());
