/**
 * Packages a default start does not need, loaded at their first use instead (docs/benchmarks.md, "Start-up"): each
 * costs a start 25–35 ms of CPU to import, and an empty store signs no plugin identity token, verifies no cloud
 * login and parses no cron schedule. A synchronous `require` (both are safe to require: jose is ESM without
 * top-level await, cron-parser CommonJS, and either way Node hands back the one instance `import` would) keeps the
 * callers synchronous where they are, e.g. a schedule checked inside a request's validation.
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function firstUse<T>(name: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= require(name) as T);
}

export const jose = firstUse<typeof import('jose')>('jose');
export const cronParser = firstUse<typeof import('cron-parser')>('cron-parser');
