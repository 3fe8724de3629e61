import { describe, expect, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../support/ports.ts';

/**
 * No Docker engine runs here, so this test performs the Dockerfile's recipe by hand: the production install
 * command from its RUN line, the files its COPY lines name, its CMD, then its HEALTHCHECK command.
 */
const dockerfile = readFileSync('Dockerfile', 'utf8').replace(/\\\n\s*/g, '');
const runLine = /^RUN (npm ci [^&\n]+)/m.exec(dockerfile)![1].trim();
const cmd = JSON.parse(/^CMD (\[.+\])$/m.exec(dockerfile)![1]) as string[];
const health = JSON.parse(/^HEALTHCHECK .*?CMD (\[.+\])$/m.exec(dockerfile)![1]) as string[];


describe('the container recipe (Dockerfile)', () => {
  it('"a production install starts and answers its HEALTHCHECK"', async () => {
    const app = mkdtempSync(join(tmpdir(), 'strongroom-image-'));
    try {
      cpSync('package.json', join(app, 'package.json'));
      cpSync('package-lock.json', join(app, 'package-lock.json'));
      cpSync('src', join(app, 'src'), { recursive: true });
      const [npm, ...npmArgs] = runLine.split(/\s+/);
      await promisify(execFile)(npm, npmArgs, { cwd: app, env: { ...process.env, npm_config_loglevel: 'error' } });
      const port = await freePort();
      const [, ...args] = cmd;
      const child = spawn(process.execPath, args, {
        cwd: app,
        env: { ...process.env, NODE_ENV: 'production', STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_STORAGE: `sqlite:${join(app, 'data', 'strongroom.db')}` },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (d) => (output += d));
      child.stderr.on('data', (d) => (output += d));
      try {
        const probe = health.map((a) => a.replace('8200', String(port)));
        let ok = false;
        for (let i = 0; i < 100 && !ok; i++) {
          ok = await promisify(execFile)(process.execPath, probe.slice(1)).then(() => true, () => false);
          if (!ok) await new Promise((r) => setTimeout(r, 100));
        }
        expect(ok, output).toBe(true);
        expect(output).toMatch(/Root token \(shown once/);
      } finally {
        child.kill('SIGTERM');
        await new Promise((r) => child.once('exit', r));
      }
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  }, 180_000);
});
