import { randomInt } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

/** The lowest port freePort picks from: above the well-known and most fixed service ports. */
const LOWEST = 10_000;

/**
 * A loopback port nothing listens on (bound, then closed): for a server to start on, or a dead endpoint. The server
 * binds it only later (a process start takes seconds on a loaded machine), so it is picked at random below the range
 * the system hands out for port 0 and outgoing connections (Linux: ip_local_port_range). A port from that range, free
 * when picked, could meanwhile become any process's listen(0) or the local end of a connection, and the server would
 * fail to start with EADDRINUSE; below it, only another picker choosing the same number at the same time can take it.
 */
export async function freePort(): Promise<number> {
  const below = ephemeralLow();
  for (let attempt = 0; below !== undefined && below > LOWEST && attempt < 100; attempt++) {
    const port = randomInt(LOWEST, below);
    if ((await bind(port)) !== undefined) return port;
  }
  // No room below the system's range: a port from it, which the system at least does not hand out while it is bound.
  const port = await bind(0);
  if (port === undefined) throw new Error('no free loopback port');
  return port;
}

/** The bottom of the system's ephemeral port range, where the system says. */
function ephemeralLow(): number | undefined {
  try {
    return Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]) || undefined;
  } catch {
    return undefined;
  }
}

/** Binds `port` on 127.0.0.1 and closes it again: the port it had, or undefined when it was taken. */
function bind(port: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(undefined));
    srv.listen(port, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === 'object' && addr ? addr.port : undefined));
    });
  });
}
