// The README's and docs' walkthroughs, run as a reader pastes them (docs/doc-tests.md): every shell block not marked
// no-run, in document order (README.md, then docs/*.md by name), in one bash, against the real processes the blocks
// themselves start (examples/ldap's slapd, `npm run emulator`, `npm start`). Only the ports and the root token the
// text exports are replaced, so a command that stops working fails here.
import { execFileSync, spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { BLOCK_MARK, fileBlocks, overrideExports, shellBlocks, walkthroughScript, type ShellBlock } from '../support/doc-blocks.ts';
import { freePort } from '../support/ports.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RUN_LIMIT_MS = 240_000;

async function documents(): Promise<Array<{ name: string; blocks: ShellBlock[] }>> {
  const docs = (await readdir(join(ROOT, 'docs'))).filter((f) => f.endsWith('.md')).sort();
  return [{ name: 'README.md', blocks: fileBlocks(join(ROOT, 'README.md'), 'README.md') },
    ...docs.map((f) => ({ name: `docs/${f}`, blocks: fileBlocks(join(ROOT, 'docs', f), `docs/${f}`) }))];
}

interface Run { code: number | null; output: string; seconds: number }

/** Runs a script with bash in its own process group, which is killed afterwards with whatever the blocks started. */
async function runBash(script: string, cwd: string, env: Record<string, string>): Promise<Run> {
  const started = performance.now();
  const child = spawn('bash', ['-c', script], { cwd, env: { ...process.env, ...env }, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString('utf8')));
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), RUN_LIMIT_MS);
    child.once('exit', (exitCode) => {
      clearTimeout(timer);
      resolve(exitCode);
    });
  });
  const group = -child.pid!;
  const alive = (): boolean => {
    try {
      process.kill(group, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (alive()) process.kill(group, 'SIGTERM');
  for (let i = 0; i < 100 && alive(); i++) await new Promise((resolve) => setTimeout(resolve, 100));
  if (alive()) process.kill(group, 'SIGKILL');
  return { code, output, seconds: (performance.now() - started) / 1000 };
}

const work = await mkdtemp(join(tmpdir(), 'readme-blocks-'));
afterAll(() => rm(work, { recursive: true, force: true }));

describe('the marker convention', () => {
  it('"a shell block is run unless marked no-run; any other marker is an error"', () => {
    const md = '```sh\necho a\n```\n\n```sh no-run\necho b\n```\n\n```yaml\nx: 1\n```\n';
    expect(shellBlocks(md, 'x.md')).toEqual([
      { source: 'x.md:1', run: true, text: 'echo a' },
      { source: 'x.md:5', run: false, text: 'echo b' },
    ]);
    expect(() => shellBlocks('```sh skip\necho\n```\n', 'x.md')).toThrow(/x.md:1: unknown marker "skip"/);
    expect(() => shellBlocks('```sh\necho\n', 'x.md')).toThrow(/never closes/);
  });

  it('"only the values of the names the caller overrides change, and only in export lines"', () => {
    const text = 'export VAULT_ADDR=http://127.0.0.1:8200 VAULT_TOKEN=root OTHER=1\ncurl $VAULT_ADDR # VAULT_ADDR=x\nVAULT_ADDR=y';
    expect(overrideExports(text, { VAULT_ADDR: 'http://127.0.0.1:5', VAULT_TOKEN: 't' })).toBe(
      'export VAULT_ADDR=http://127.0.0.1:5 VAULT_TOKEN=t OTHER=1\ncurl $VAULT_ADDR # VAULT_ADDR=x\nVAULT_ADDR=y');
  });

  it('"every README and docs shell block is either run or marked no-run, and the README has walkthrough blocks"', async () => {
    const all = await documents();
    expect(all[0].blocks.filter((b) => b.run).length).toBeGreaterThanOrEqual(8);
  });
});

describe('README.md and docs/*.md walkthroughs', () => {
  it('"every block runs when pasted, in order, on a fresh machine"', { timeout: RUN_LIMIT_MS + 30_000 }, async () => {
    const blocks = (await documents()).flatMap((d) => d.blocks);
    const overrides = {
      VAULT_ADDR: `http://127.0.0.1:${await freePort()}`,
      LDAP_PORT: String(await freePort()),
      // The blocks learn the emulator's addresses from its files, so it may bind ports the system picks.
      EMULATOR_PORT: '0',
    };
    // mktemp -d in the blocks lands in this test's directory, removed afterwards.
    const run = await runBash(walkthroughScript(blocks, overrides), ROOT, { TMPDIR: work });
    const marks = run.output.split('\n').filter((l) => l.startsWith(BLOCK_MARK));
    const last = marks.at(-1)?.slice(BLOCK_MARK.length);
    console.log(`doc walkthroughs: ${marks.length - 1} blocks in ${run.seconds.toFixed(1)} s`);
    if (process.env.DOC_BLOCKS_SHOW) console.log(run.output);
    expect(run.code, `the block at ${last} failed (exit ${run.code}):\n${run.output.slice(-4000)}`).toBe(0);
    expect(last).toBe('end');
  });
});

describe('npm run emulator', () => {
  it('"it prints the commands that get a managed-identity token and log in through auth/cloud/, and they are the README\'s"', async () => {
    const dir = join(work, 'emulator');
    const child = spawn(process.execPath, ['test/support/azure-emulator/main.ts', '--port', '0', '--dir', dir],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let printed = '';
      let stderr = '';
      child.stdout!.on('data', (c: Buffer) => (printed += c.toString('utf8')));
      child.stderr!.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
      const until = performance.now() + 30_000;
      while (!printed.includes('Ctrl-C to stop.') && child.exitCode === null && performance.now() < until) await new Promise((r) => setTimeout(r, 50));
      expect(printed, `exit ${child.exitCode}: ${stderr.slice(-2000)}`).toContain('Ctrl-C to stop.');
      const commands = printed.slice(printed.indexOf('\n# ')).split('\n')
        .filter((l) => l.trim() !== '' && !l.startsWith('#') && l !== 'Ctrl-C to stop.');
      expect(commands[0]).toBe(`export EMULATOR_DIR=${dir}`);
      const readme = new Set((await documents())[0].blocks.filter((b) => b.run).flatMap((b) => b.text.split('\n')));
      expect(commands.length).toBeGreaterThan(10);
      for (const line of commands.slice(1)) expect(readme, `a printed line the README lacks: ${line}`).toContain(line);
      // What the client shell sources holds the tenant's client secret: only its owner may read it.
      expect((await stat(join(dir, 'tenant.env'))).mode & 0o777).toBe(0o600);
    } finally {
      child.kill('SIGTERM');
    }
  });

  it('"its default state directory, which holds the CA key, is git-ignored"', () => {
    expect(execFileSync('git', ['check-ignore', '.azure-emulator/ca.key'], { cwd: ROOT, encoding: 'utf8' }).trim()).toBe('.azure-emulator/ca.key');
  });
});
