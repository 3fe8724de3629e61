/**
 * Packages a default start does not need, loaded at their first use instead (docs/benchmarks.md, "Start-up"): each
 * costs a start 15–40 ms of CPU to import, and an empty store signs no plugin identity token, verifies no cloud
 * login, parses no cron schedule, is not scraped and upgrades no event stream before it listens. A synchronous
 * `require` (all are safe to require: jose is ESM without top-level await, the others CommonJS, and either way Node
 * hands back the one instance `import` would) keeps the callers synchronous where they are, e.g. a schedule checked
 * inside a request's validation.
 */
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

function firstUse<T>(name: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= require(name) as T);
}

export const jose = firstUse<typeof import('jose')>('jose');
export const cronParser = firstUse<typeof import('cron-parser')>('cron-parser');
/** Formats metrics at the first scrape (telemetry.ts); CommonJS. */
export const promClient = firstUse<typeof import('prom-client')>('prom-client');
/** The event stream's WebSocket server, at the first upgrade (http/events-stream.ts); CommonJS. */
export const ws = firstUse<typeof import('ws')>('ws');
