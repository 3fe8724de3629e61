// File audit devices under sudo are not root on the host (docs/audit.md "Where file devices write"): a device writes
// only inside STRONGROOM_AUDIT_DIR, through no link, never into a FIFO or anything but a regular file, and an
// existing file's mode is never changed. Each hostile variant is refused with a 400 and leaves its target untouched.
import { execFileSync } from 'node:child_process';
import { closeSync, constants, existsSync, mkdirSync, openSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { auditDir, enableFile, entriesAt, readEntries } from '../support/audit.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

/** The audit directory, and beside it a directory the devices must never reach. */
const root = auditDir();
const dir = join(root.dir, 'audit');
const outside = join(root.dir, 'elsewhere');
let s: TestServer;

beforeAll(async () => {
  mkdirSync(dir);
  mkdirSync(outside);
  s = await startTestServer({ env: { STRONGROOM_AUDIT_DIR: dir } });
});
afterEach(async () => {
  for (const path of Object.keys((await s.request('GET', 'sys/audit')).body.data)) await s.request('DELETE', `sys/audit/${path}`);
});
afterAll(async () => {
  await s?.close();
  root.cleanup();
});

const enable = (path: string, options: Record<string, string>) => s.request('PUT', `sys/audit/${path}`, { body: { type: 'file', options } });

/** A file outside the audit directory holding a secret of its own, mode 0600, as the unseal key would be. */
function secretFile(name: string): string {
  const file = join(outside, name);
  writeFileSync(file, 'the-unseal-key\n', { mode: 0o600 });
  return file;
}

describe('PUT sys/audit/:path (type file)', () => {
  it.each([
    ['a path outside the directory', () => secretFile('unseal.key'), /"file_path": must be a file inside the audit directory/],
    ['a path that climbs out with ..', () => join(dir, '..', 'elsewhere', secretFile('climb.key').split('/').pop()!), /"file_path": must be a file inside the audit directory/],
    ['the directory itself', () => dir, /"file_path": must be a file inside the audit directory/],
    ['a device file', () => '/dev/null', /"file_path": must be a file inside the audit directory/],
    ['a symbolic link to a file outside', () => {
      const link = join(dir, 'to-unseal.log');
      symlinkSync(secretFile('linked.key'), link);
      return link;
    }, /cannot be opened: it is a symbolic link/],
    ['a symbolic link to a file inside', () => {
      writeFileSync(join(dir, 'real.log'), '', { mode: 0o600 });
      const link = join(dir, 'alias.log');
      symlinkSync(join(dir, 'real.log'), link);
      return link;
    }, /cannot be opened: it is a symbolic link/],
    ['a dangling symbolic link (it would create its target)', () => {
      const link = join(dir, 'dangling.log');
      symlinkSync(join(outside, 'created-through-link.log'), link);
      return link;
    }, /cannot be opened: it is a symbolic link/],
    ['a file under a symlinked parent directory', () => {
      secretFile('via-parent.key');
      symlinkSync(outside, join(dir, 'parent-link'));
      return join(dir, 'parent-link', 'via-parent.key');
    }, /cannot be opened: it is outside the audit directory/],
    ['a sub-directory', () => {
      mkdirSync(join(dir, 'sub'));
      return join(dir, 'sub');
    }, /cannot be opened: EISDIR/],
    ['a FIFO nobody reads', () => {
      execFileSync('mkfifo', [join(dir, 'fifo-alone')]);
      return join(dir, 'fifo-alone');
    }, /cannot be opened: it is not a regular file/],
  ])('"a file device writes only to a regular file inside the audit directory, through no link": %s is a 400', async (_name, target, message) => {
    const file = target();
    const before = existsSync(file) && statSync(file).isFile() ? readFileSync(file) : undefined;
    const r = await enable('hostile', { file_path: file, mode: '0644' });
    expect(r.status, JSON.stringify(r.body)).toBe(400);
    expect(r.body.errors.join()).toMatch(message);
    expect((await s.request('GET', 'sys/audit')).body.data).toEqual({});
    if (before) expect(readFileSync(file), 'the target is untouched').toEqual(before);
    expect(existsSync(join(outside, 'created-through-link.log')), 'nothing is created through a link').toBe(false);
    for (const key of ['unseal.key', 'linked.key', 'via-parent.key']) if (existsSync(join(outside, key))) expect(statSync(join(outside, key)).mode & 0o777, key).toBe(0o600);
  });

  it('"a FIFO never blocks": one with a reader is refused as not a regular file, at once, and the next enable and disable answer', async () => {
    const fifo = join(dir, 'fifo-read');
    execFileSync('mkfifo', [fifo]);
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
    try {
      const r = await enable('fifo', { file_path: fifo });
      expect(r.status).toBe(400);
      expect(r.body.errors[0]).toMatch(/it is not a regular file/);
    } finally {
      closeSync(reader);
    }
    await enableFile(s, 'after-fifo', join(dir, 'after-fifo.log'));
    expect((await s.request('DELETE', 'sys/audit/after-fifo')).status).toBe(204);
  });

  it('"an existing file\'s mode is never changed": a 0600 log stays 0600 whatever mode the device asks for, and is appended to', async () => {
    const file = join(dir, 'existing.log');
    writeFileSync(file, '', { mode: 0o600 });
    await enableFile(s, 'existing', file, { mode: '0644' });
    expect((await s.request('GET', 'sys/mounts')).status).toBe(200);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(entriesAt(readEntries(file), 'sys/mounts').length).toBe(2);
  });

  it('"the mode applies to a file the server creates": created 0640 when asked, 0600 by default and for "0000"', async () => {
    await enableFile(s, 'made', join(dir, 'made.log'), { mode: '0640' });
    await enableFile(s, 'default', join(dir, 'default.log'));
    await enableFile(s, 'zero', join(dir, 'zero.log'), { mode: '0000' });
    expect(statSync(join(dir, 'made.log')).mode & 0o777).toBe(0o640);
    expect(statSync(join(dir, 'default.log')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'zero.log')).mode & 0o777).toBe(0o600);
  });

  it('"stdout and discard stay available": they name no file', async () => {
    await enableFile(s, 'nowhere', 'discard');
    await enableFile(s, 'out', 'stdout');
    // Read from the broker, not through the API: an entry on stdout would land in the test's output.
    expect(s.core.audit.list().map((d) => d.path).sort()).toEqual(['nowhere/', 'out/']);
    expect((await s.request('DELETE', 'sys/audit/out')).status).toBe(204);
  });

  it('"a refusal quotes no path": the answer names the field and the rule, never the value sent', async () => {
    const file = join(outside, 'quoted-nowhere.log');
    for (const path of [file, join(dir, 'missing', 'x.log')]) {
      const r = await enable('quoted', { file_path: path });
      expect(r.status).toBe(400);
      expect(r.body.errors.join()).not.toContain(path);
    }
  });
});
