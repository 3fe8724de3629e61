/**
 * A store with many leases for the `lease restart` section, written fast: through the lease manager's own records
 * (`prepare`: the lease, its time-index entry, its event and guards, sealed by the barrier), committed thousands to
 * a transaction rather than one each, as a fleet of clients issuing credentials at once would have them grouped.
 */
import type { Server } from '../src/server.ts';
import { StorageView } from '../src/core/storage/view.ts';

/** Leases per commit (each ~1.4 KB of rows with its index entry and event): one transaction of a few MB. */
const PER_COMMIT = 5_000;
/** Commits handed to the store at once, so sealing the next batch overlaps the writer's fsync of the last. */
const IN_FLIGHT = 2;

/** Registers `count` leases whose expiries are spread over `spreadHours` from an hour from now; returns seconds taken. */
export async function writeLeases(s: Server, count: number, spreadHours = 767): Promise<number> {
  const view = new StorageView(s.core.barrier, '');
  const now = Date.now();
  const started = performance.now();
  const commits = new Set<Promise<void>>();
  for (let i = 0; i < count; i += PER_COMMIT) {
    const writes = [];
    for (let j = i; j < Math.min(count, i + PER_COMMIT); j++) {
      // Spread so that a restart must not load them all: only the next few minutes' are armed.
      const ttl = 3600 + Math.floor((j / count) * spreadHours * 3600);
      writes.push(s.core.leases.prepare({ id: `kv/creds/bench/${j}`, kind: 'secret', mountPath: 'kv/', secretType: 'test_secret', internal: { name: `n${j}` }, issueTime: now, expireTime: now + ttl * 1000, ttl, maxTtl: 0, renewable: true, tokenSalted: '' }).write);
    }
    const commit = view.commit(writes).finally(() => commits.delete(commit));
    commits.add(commit);
    if (commits.size >= IN_FLIGHT) await Promise.race(commits);
  }
  await Promise.all(commits);
  return (performance.now() - started) / 1000;
}
