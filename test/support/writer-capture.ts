import { createRequire, syncBuiltinESMExports } from 'node:module';
import type { Worker as WorkerType } from 'node:worker_threads';

/**
 * Records every SQLite writer thread started from now on, so a test can kill one as a crash would. It swaps
 * `Worker` in node:worker_threads (CommonJS and, through syncBuiltinESMExports, the ESM bindings) for a subclass
 * that remembers its instances; `restore` puts the original back.
 */
export function captureSqliteWriters(): { writers: WorkerType[]; restore(): void } {
  const threads = createRequire(import.meta.url)('node:worker_threads') as { Worker: typeof WorkerType };
  const Original = threads.Worker;
  const writers: WorkerType[] = [];
  threads.Worker = class extends Original {
    constructor(...args: ConstructorParameters<typeof WorkerType>) {
      super(...args);
      // The writer runs as the source of sqlite-writer.ts's runWriter (eval).
      if (/^\(function runWriter\b/.test(String(args[0]))) writers.push(this);
    }
  };
  syncBuiltinESMExports();
  return {
    writers,
    restore() {
      threads.Worker = Original;
      syncBuiltinESMExports();
    },
  };
}
