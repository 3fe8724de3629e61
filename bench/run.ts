/**
 * `npm run bench`: throughput and memory figures, each as a ratio against a baseline measured in the same run
 * on the same machine. BENCH_SECONDS sets the load duration per measurement (default 5).
 */
import { benchCloudAuth, benchCloudSecrets } from './cloud.ts';
import { clusterSections } from './cluster.ts';
import { benchConsole } from './console.ts';
import { benchCore, benchLeaseRestart } from './core.ts';
import { benchEvents } from './events.ts';
import { ldapSections } from './ldap.ts';
import { benchStartup } from './startup.ts';

const seconds = Number(process.env.BENCH_SECONDS ?? 5);
const ldap = ldapSections(seconds);
const cluster = clusterSections(seconds);
// BENCH_ONLY=cloud runs the sections whose names contain "cloud".
const only = process.env.BENCH_ONLY;
const sections: Array<[string, () => Promise<string[]>]> = [
  ['core pipeline', () => benchCore(seconds)],
  ['start-up', () => benchStartup()],
  ['lease restart', () => benchLeaseRestart((process.env.BENCH_LEASES ?? '100000,1000000').split(',').map(Number))],
  ['cloud secrets', () => benchCloudSecrets(seconds)],
  ['cloud auth', () => benchCloudAuth(seconds)],
  ...ldap.sections,
  ...cluster.sections,
  ['events: sequence cost', () => benchEvents(seconds, cluster.postgres)],
  ['console', () => benchConsole()],
];

try {
  for (const [name, run] of sections.filter(([n]) => !only || n.includes(only))) {
    process.stdout.write(`\n== ${name}\n`);
    for (const line of await run()) process.stdout.write(`${line}\n`);
  }
} finally {
  await ldap.cleanup();
  await cluster.cleanup();
}
