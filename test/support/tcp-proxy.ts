/**
 * A TCP forwarder on 127.0.0.1 that a test can stop and start again on the same port: the directory "stops" for the
 * server under test (refused connections, open ones cut) while the shared slapd keeps serving every other test.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { freePort } from './ports.ts';

export interface TcpProxy {
  /** ldap://127.0.0.1:<port> */
  url: string;
  /** Closes the listener and cuts every open connection. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  // Not port 0: one the system hands out could, while the proxy is stopped, become another process's listener or
  // connection, and start() would fail (freePort's ports lie below that range).
  const port = await freePort();
  const listen = async (): Promise<void> => {
    const s = createServer((client) => {
      const upstream = connect(targetPort, targetHost);
      for (const sock of [client, upstream]) {
        sockets.add(sock);
        sock.on('close', () => sockets.delete(sock));
        sock.on('error', () => sock.destroy());
      }
      client.pipe(upstream).pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => s.once('error', reject).listen(port, '127.0.0.1', () => resolve()));
    server = s;
  };
  await listen();
  return {
    url: `ldap://127.0.0.1:${port}`,
    async stop() {
      const s = server;
      server = undefined;
      if (!s) return;
      // close() waits for every connection: stop accepting first, then cut them, including one accepted meanwhile.
      const closed = new Promise<void>((resolve) => s.close(() => resolve()));
      s.on('connection', (sock: Socket) => sock.destroy());
      for (const sock of sockets) sock.destroy();
      await closed;
    },
    start: listen,
  };
}
