/**
 * A TCP proxy in front of slapd that stalls and recovers the way a network path does (modelled on the audit's
 * modproxy, docs/security.md "Directory writes"): armed, it holds the next LDAP request of a chosen kind seen on any
 * connection, with everything sent after it on that connection, until `release` delivers it, even when the client
 * closed its side meanwhile (the kernel keeps retransmitting bytes written before a close). It can also cut a
 * connection right after (or instead of) forwarding a request, and hide the Assertion Control from the rootDSE, so
 * the server under test sees a directory without it.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';

/** LDAP protocolOp tags (RFC 4511, APPLICATION n). */
export const LDAP_OP = { search: 0x63, modify: 0x66 } as const;

const ASSERTION_OID = Buffer.from('1.3.6.1.1.12');
/** Same length, so every BER length around it stays right. */
const UNKNOWN_OID = Buffer.from('1.3.6.1.1.99');

/** What the proxy does with the next request of a kind. */
export type Stall = 'hold' | 'reset-after-send' | 'reset-before-send';

export interface StallProxy {
  /** ldap://127.0.0.1:<port> */
  url: string;
  /** Acts on the next request whose op tag is `op` (default: a ModifyRequest), on any connection. */
  arm(stall: Stall, op?: number): void;
  /** Whether requests are held now. */
  holding(): boolean;
  /** Delivers what was held to slapd, then ends that connection. */
  release(): Promise<void>;
  /** ModifyRequests forwarded to slapd so far (a held one counts when released). */
  modifies(): number;
  /** When true, the rootDSE's supportedControl no longer lists the Assertion Control. */
  hideAssertionControl: boolean;
  close(): Promise<void>;
}

/** Op tags of the complete LDAP messages at the start of a chunk, with their offsets (enough for ldapts' writes). */
function messages(buf: Buffer): Array<{ offset: number; op: number }> {
  const out: Array<{ offset: number; op: number }> = [];
  let i = 0;
  while (i + 2 < buf.length && buf[i] === 0x30) {
    const start = i;
    let len = buf[i + 1]!;
    i += 2;
    if (len & 0x80) {
      const n = len & 0x7f;
      len = 0;
      for (let k = 0; k < n; k++) len = (len << 8) | buf[i + k]!;
      i += n;
    }
    const body = i;
    // messageID INTEGER, then the protocolOp's tag.
    if (buf[body] === 0x02) out.push({ offset: start, op: buf[body + 2 + buf[body + 1]!]! });
    i = body + len;
  }
  return out;
}

interface Conn {
  client: Socket;
  server: Socket;
  held: Buffer[] | undefined;
  clientEnded: boolean;
  /** The next answer from slapd is dropped and the client's connection reset instead. */
  cutOnAnswer: boolean;
}

export async function startStallProxy(targetHost: string, targetPort: number): Promise<StallProxy> {
  const conns = new Set<Conn>();
  let armed: { stall: Stall; op: number } | undefined;
  let forwardedModifies = 0;
  const proxy: StallProxy = {
    url: '',
    hideAssertionControl: false,
    arm(stall, op = LDAP_OP.modify) {
      armed = { stall, op };
    },
    holding: () => [...conns].some((c) => c.held !== undefined),
    async release() {
      for (const c of conns) {
        if (!c.held) continue;
        const held = c.held;
        c.held = undefined;
        for (const chunk of held) forward(c, chunk);
        if (c.clientEnded) setTimeout(() => c.server.end(), 500);
      }
      // Let slapd read and apply what it was given.
      await new Promise((r) => setTimeout(r, 300));
    },
    modifies: () => forwardedModifies,
    close: async () => {
      for (const c of conns) {
        c.client.destroy();
        c.server.destroy();
      }
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
  const forward = (c: Conn, chunk: Buffer): void => {
    forwardedModifies += messages(chunk).filter((m) => m.op === LDAP_OP.modify).length;
    c.server.write(chunk);
  };
  const listener: Server = createServer((client) => {
    const server = connect(targetPort, targetHost);
    const c: Conn = { client, server, held: undefined, clientEnded: false, cutOnAnswer: false };
    conns.add(c);
    client.on('data', (d: Buffer) => {
      if (c.held) return void c.held.push(d);
      const hit = armed && messages(d).find((m) => m.op === armed!.op);
      if (!hit || !armed) return forward(c, d);
      const { stall } = armed;
      armed = undefined;
      if (stall === 'hold') {
        forward(c, d.subarray(0, hit.offset));
        c.held = [d.subarray(hit.offset)];
      } else if (stall === 'reset-after-send') {
        // slapd gets (and applies) the request; its answer is lost with the connection.
        c.cutOnAnswer = true;
        forward(c, d);
      } else {
        client.resetAndDestroy();
        server.end();
      }
    });
    client.on('end', () => {
      c.clientEnded = true;
      if (!c.held) server.end();
    });
    client.on('close', () => {
      c.clientEnded = true;
      if (!c.held) server.end();
    });
    client.on('error', () => undefined);
    server.on('data', (d: Buffer) => {
      if (client.destroyed) return;
      if (c.cutOnAnswer) return void client.resetAndDestroy();
      client.write(proxy.hideAssertionControl ? replaceAll(d, ASSERTION_OID, UNKNOWN_OID) : d);
    });
    server.on('end', () => client.end());
    server.on('error', () => client.destroy());
    server.on('close', () => conns.delete(c));
  });
  await new Promise<void>((resolve, reject) => listener.once('error', reject).listen(0, '127.0.0.1', () => resolve()));
  proxy.url = `ldap://127.0.0.1:${(listener.address() as { port: number }).port}`;
  return proxy;
}

function replaceAll(buf: Buffer, from: Buffer, to: Buffer): Buffer {
  let at = buf.indexOf(from);
  if (at < 0) return buf;
  const out = Buffer.from(buf);
  while (at >= 0) {
    to.copy(out, at);
    at = out.indexOf(from, at + from.length);
  }
  return out;
}
