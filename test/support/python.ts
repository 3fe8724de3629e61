// Runs Python client scripts (hvac) against a test server: each script is written to a temp dir beside a
// shared prelude, gets its input as JSON on stdin and prints its result as JSON on its last stdout line.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * python3 on PATH first, then Debian's own interpreter: python3-hvac installs into the system Python, which a
 * pyenv or virtualenv python3 earlier on PATH does not see.
 */
const INTERPRETERS = ['python3', '/usr/bin/python3'];

function run(python: string, args: string[], stdin: string, timeoutMs: number): Promise<{ ok: boolean; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(python, args, { timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      resolve({ ok: !err, stdout, stderr });
    });
    child.stdin?.on('error', () => undefined);
    child.stdin?.end(stdin);
  });
}

/** The first interpreter that can import `module`, or undefined. */
export async function findPython(module: string): Promise<string | undefined> {
  for (const python of INTERPRETERS) {
    if ((await run(python, ['-c', `import ${module}`], '', 15_000)).ok) return python;
  }
  return undefined;
}

/** What every hvac script starts from: `ctx` (url, token) from stdin, a `client`, and the helpers the tests share. */
export const HVAC_PRELUDE = String.raw`
import json
import sys

import hvac
from hvac import exceptions

ctx = json.load(sys.stdin)
client = hvac.Client(url=ctx["url"], token=ctx["token"])


def as_client(token):
    return hvac.Client(url=ctx["url"], token=token)


def refusal(call):
    """The hvac exception a call raises (InvalidRequest 400, Forbidden 403, InvalidPath 404), or None."""
    try:
        call()
    except exceptions.VaultError as err:
        return type(err).__name__
    return None


def emit(result):
    print(json.dumps(result))
`;

export interface PythonScripts {
  /** Runs `script` (after `from prelude import *`) with `input` on stdin; resolves with its printed JSON. */
  run<T = any>(script: string, input: Record<string, unknown>): Promise<T>;
  close(): Promise<void>;
}

export async function pythonScripts(python: string, prelude: string): Promise<PythonScripts> {
  const dir = await mkdtemp(join(tmpdir(), 'strongroom-python-'));
  await writeFile(join(dir, 'prelude.py'), prelude);
  let n = 0;
  return {
    async run(script, input) {
      const file = join(dir, `script_${++n}.py`);
      await writeFile(file, `from prelude import *\n\n${script}`);
      const res = await run(python, [file], JSON.stringify(input), 60_000);
      if (!res.ok) throw new Error(`${file} failed:\n${res.stderr.slice(-4000)}`);
      const last = res.stdout.trim().split('\n').at(-1) ?? '';
      try {
        return JSON.parse(last) as never;
      } catch {
        throw new Error(`${file} printed no JSON result:\n${res.stdout.slice(-2000)}\n${res.stderr.slice(-2000)}`);
      }
    },
    close: () => rm(dir, { recursive: true, force: true }),
  };
}
