/**
 * Node's compile cache for the server's own start (docs/benchmarks.md, "Start-up"): the type-stripped output and
 * V8's code cache of every module, kept between starts, so a restart skips most of the stripping and compiling
 * (~0.4 s of CPU on a small machine). Imports only node: built-ins, because everything imported before the cache is
 * on is compiled without it.
 *
 * Where: NODE_COMPILE_CACHE when set (e.g. a directory the image pre-builds), else `strongroom-compile-cache-<uid>`
 * under the OS temporary directory, made private to this user. NODE_DISABLE_COMPILE_CACHE=1 turns it off. The cache
 * only ever speeds up a start: Node checks each entry against the source's hash and recompiles on any mismatch, and a
 * directory that cannot be made or written (a read-only container without a writable /tmp) leaves the start as it was.
 */
import { lstatSync, mkdirSync } from 'node:fs';
import { enableCompileCache, flushCompileCache } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A directory someone else could write to would let them hand this process compiled code: refused. */
function privateDirectory(): string | undefined {
  const uid = process.getuid?.() ?? 0;
  const dir = join(tmpdir(), `strongroom-compile-cache-${uid}`);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  return st.isDirectory() && st.uid === uid && (st.mode & 0o022) === 0 ? dir : undefined;
}

/** Turns the cache on for every module imported after this call; never throws. */
export function startCompileCache(): void {
  // Node itself turned the cache on from NODE_COMPILE_CACHE at start, or found that directory unusable. Asked again
  // without a directory after such a failure, it would fall back to a shared `node-compile-cache` under /tmp.
  if (process.env.NODE_COMPILE_CACHE) return;
  try {
    const dir = privateDirectory();
    if (dir) enableCompileCache(dir);
  } catch {
    // No cache: the start is as slow as without one, and otherwise the same.
  }
}

/**
 * Writes what this start compiled now rather than at exit: a server usually ends by a signal or a kill, and a cache
 * written only at a clean exit would stay cold in a container that is always stopped hard.
 */
export function saveCompileCache(): void {
  try {
    flushCompileCache();
  } catch {
    // As above: a cache that cannot be written only costs the next start its speed-up.
  }
}
