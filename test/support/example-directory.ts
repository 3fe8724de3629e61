/**
 * examples/ldap's directory as README.md starts it on a machine without Docker: its entrypoint with this machine's
 * slapd, loopback only, on a state directory of the caller's. Resolves once the bind account binds.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { freePort } from './ports.ts';
import { canBind } from './slapd.ts';

const EXAMPLE = fileURLToPath(new URL('../../examples/ldap/', import.meta.url));
export const EXAMPLE_BIND_DN = 'cn=strongroom,ou=system,dc=example,dc=org';

export interface ExampleDirectory {
  url: string;
  port: number;
  stop(): Promise<void>;
}

export async function startExampleDirectory(stateDir: string, bindPassword: string): Promise<ExampleDirectory> {
  const port = await freePort();
  const url = `ldap://127.0.0.1:${port}`;
  const proc: ChildProcess = spawn('sh', [`${EXAMPLE}entrypoint.sh`], {
    env: { ...process.env, LDAP_HOST: '127.0.0.1', LDAP_PORT: String(port), LDAP_STATE_DIR: stateDir, LDAP_SEED: `${EXAMPLE}seed.ldif`, LDAP_BIND_PASSWORD: bindPassword },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  proc.stderr!.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    await exited;
  };
  const until = performance.now() + 30_000;
  while (!(await canBind(url, EXAMPLE_BIND_DN, bindPassword).catch(() => false))) {
    if (proc.exitCode !== null || performance.now() > until) {
      await stop();
      throw new Error(`examples/ldap's directory did not start: ${stderr.slice(-2000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return { url, port, stop };
}
