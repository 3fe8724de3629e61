/** A forwarder that stops an LDAP exchange at the instant a crash test needs (kill -9 after a modify). Free of vitest imports. */
import { createServer, connect, type Server, type Socket } from 'node:net';

/**
 * A TCP forwarder to slapd that, once armed, holds back the answer to the next LDAP modify (ModifyResponse,
 * [APPLICATION 7]) and everything after it on that connection: the directory has made the change, the server under
 * test waits for the answer. It also keeps what clients sent since it was armed (the modify carries the password).
 */
export async function holdingProxy(host: string, port: number) {
  const sockets = new Set<Socket>();
  let armed: (() => void) | undefined;
  let sent = Buffer.alloc(0);
  const server: Server = createServer((client) => {
    const upstream = connect(port, host);
    for (const sock of [client, upstream]) {
      sockets.add(sock);
      sock.on('error', () => sock.destroy());
      sock.on('close', () => sockets.delete(sock));
    }
    client.on('data', (chunk: Buffer) => {
      if (armed) sent = Buffer.concat([sent, chunk]);
      upstream.write(chunk);
    });
    let pending = Buffer.alloc(0);
    let holding = false;
    upstream.on('data', (chunk: Buffer) => {
      if (holding) return;
      pending = Buffer.concat([pending, chunk]);
      // Whole BER messages only: SEQUENCE, its length, messageID (INTEGER), then the operation's tag.
      for (;;) {
        if (pending.length < 2) return;
        let len = pending[1]!;
        let head = 2;
        if (len & 0x80) {
          const n = len & 0x7f;
          if (pending.length < 2 + n) return;
          len = 0;
          for (let i = 0; i < n; i++) len = len * 256 + pending[2 + i]!;
          head = 2 + n;
        }
        if (pending.length < head + len) return;
        const op = pending[head + 2 + pending[head + 1]!];
        if (armed && op === 0x67) {
          holding = true;
          armed();
          return;
        }
        client.write(pending.subarray(0, head + len));
        pending = pending.subarray(head + len);
      }
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    url: `ldap://127.0.0.1:${(server.address() as { port: number }).port}`,
    /** Resolves once a modify's answer is held back. */
    holdNextModify(): Promise<void> {
      sent = Buffer.alloc(0);
      return new Promise((resolve) => (armed = resolve));
    },
    sent: () => sent,
    /** Forwards normally again: connections holding an answer are cut (their client is gone anyway). */
    release(): void {
      armed = undefined;
      for (const sock of sockets) sock.destroy();
    },
    close: () => new Promise<void>((resolve) => {
      for (const sock of sockets) sock.destroy();
      server.close(() => resolve());
    }),
  };
}
