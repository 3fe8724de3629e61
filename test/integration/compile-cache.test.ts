// src/compile-cache.ts, with real server processes: the start keeps Node's compile cache in a directory private to
// its user, refuses one that others can write, and starts the same whether or not the cache can be kept.
import { afterEach, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startNode, type NodeProcess } from '../support/node-process.ts';

const dirs: string[] = [];
const nodes: NodeProcess[] = [];
afterEach(async () => {
  while (nodes.length) await nodes.pop()!.stop();
  while (dirs.length) rmSync(dirs.pop()!, { recursive: true, force: true });
});
const freshDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'strongroom-compile-cache-test-'));
  dirs.push(d);
  return d;
};

/** A dev node on memory storage with `env`; asserts that it answers healthy. */
async function healthyNode(env: Record<string, string>): Promise<NodeProcess> {
  const node = await startNode('memory', randomBytes(32).toString('base64'), env);
  nodes.push(node);
  expect((await node.request('GET', 'sys/health', { token: null })).status).toBe(200);
  return node;
}

/** The cache's entries (Node writes them under a directory named for its version), waited for up to 10 s. */
async function entries(dir: string, expectSome: boolean): Promise<string[]> {
  const list = () => (existsSync(dir) ? readdirSync(dir, { recursive: true }).map(String) : []);
  const until = performance.now() + 10_000;
  while (expectSome && list().length < 2 && performance.now() < until) await new Promise((r) => setTimeout(r, 50));
  return list();
}

const uid = process.getuid!();

describe('the compile cache of src/main.ts', () => {
  it('"kept under the temporary directory, private to the user" once the server listens', async () => {
    const tmp = freshDir();
    await healthyNode({ TMPDIR: tmp });
    const dir = join(tmp, `strongroom-compile-cache-${uid}`);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect((await entries(dir, true)).some((e) => e.startsWith(`${process.version}-`))).toBe(true);
  });

  it('"NODE_COMPILE_CACHE, when set, is where it is kept"', async () => {
    const cache = join(freshDir(), 'cache');
    const tmp = freshDir();
    await healthyNode({ TMPDIR: tmp, NODE_COMPILE_CACHE: cache });
    expect((await entries(cache, true)).length).toBeGreaterThan(1);
    expect(existsSync(join(tmp, `strongroom-compile-cache-${uid}`))).toBe(false);
  });

  it('"a directory others can write is refused": the server starts and keeps nothing in it', async () => {
    const tmp = freshDir();
    const dir = join(tmp, `strongroom-compile-cache-${uid}`);
    mkdirSync(dir);
    chmodSync(dir, 0o777);
    await healthyNode({ TMPDIR: tmp });
    expect(await entries(dir, false)).toEqual([]);
  });

  it('"NODE_DISABLE_COMPILE_CACHE turns it off"', async () => {
    const tmp = freshDir();
    await healthyNode({ TMPDIR: tmp, NODE_DISABLE_COMPILE_CACHE: '1' });
    expect(await entries(join(tmp, `strongroom-compile-cache-${uid}`), false)).toEqual([]);
  });

  // A read-only container without a writable /tmp, or a cache path that is not a directory.
  it.each([
    ['the temporary directory is a file', (d: string) => ({ TMPDIR: join(d, 'file') })],
    ['the temporary directory does not exist and cannot be made', (d: string) => ({ TMPDIR: join(d, 'file', 'below') })],
    ['NODE_COMPILE_CACHE is a file', (d: string) => ({ NODE_COMPILE_CACHE: join(d, 'file') })],
  ])('"a cache that cannot be kept never stops the server": %s', async (_, env) => {
    const d = freshDir();
    writeFileSync(join(d, 'file'), 'not a directory');
    await healthyNode(env(d));
  });
});
