import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { connect, isIPv6, type Socket } from 'node:net';
import { withoutTarget, type Sink } from './sink.ts';

export type SocketType = 'tcp' | 'udp' | 'unix';

/**
 * A stream (TCP, Unix) or datagram (UDP) socket to a log collector. A write counts once the kernel has taken it;
 * one that does not complete within the write timeout, or a connection that cannot be made, fails. A broken
 * connection is made again on the next write, once (Vault's rule).
 */
export class SocketSink implements Sink {
  readonly #type: SocketType;
  readonly #address: string;
  readonly #timeoutMs: number;
  #stream: Socket | undefined;
  #datagram: UdpSocket | undefined;
  #closed = false;

  constructor(type: SocketType, address: string, timeoutMs: number) {
    this.#type = type;
    this.#address = address;
    this.#timeoutMs = timeoutMs;
  }

  async open(): Promise<void> {
    if (this.#type === 'udp') this.#datagram = await this.#bindDatagram();
    else this.#stream = await this.#connect();
  }

  async write(lines: string[]): Promise<void> {
    if (this.#closed) throw new Error('the device is disabled');
    try {
      await this.#send(lines);
    } catch {
      this.#drop();
      await this.#send(lines);
    }
  }

  async reopen(): Promise<void> {
    // Nothing to rotate; a socket that broke meanwhile is already made again by the next write.
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#drop();
  }

  async #send(lines: string[]): Promise<void> {
    if (this.#type === 'udp') {
      const socket = this.#datagram ??= await this.#bindDatagram();
      // One entry per datagram, as a collector reading datagrams expects.
      for (const line of lines) await this.#timed((done) => socket.send(line, done), () => this.#drop());
      return;
    }
    // A peer that closed its end is noticed before writing into a connection that would swallow the line.
    if (!this.#stream || this.#stream.destroyed || this.#stream.readableEnded) this.#stream = await this.#connect();
    const stream = this.#stream;
    await this.#timed((done) => stream.write(lines.length === 1 ? lines[0] : lines.join(''), done), () => stream.destroy());
  }

  /** Runs `start`, which calls back once; past the write timeout `abandon` runs and the write fails. */
  #timed(start: (done: (err?: Error | null) => void) => void, abandon: () => void): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        abandon();
        reject(new Error(`write to the ${this.#type} collector timed out after ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      start((err) => {
        clearTimeout(timer);
        if (err) reject(err);
        else resolve();
      });
    });
  }

  #connect(): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = this.#type === 'unix' ? connect({ path: this.#address }) : connect(hostPort(this.#address));
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`connecting to the ${this.#type} collector timed out after ${this.#timeoutMs} ms`));
      }, this.#timeoutMs);
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(withoutTarget(err));
      });
      socket.once('connect', () => {
        clearTimeout(timer);
        // Later errors end the connection ('close' follows); the next write sees it and connects again.
        socket.on('error', () => undefined);
        // The collector has nothing to say; whatever it sends is read and dropped so it cannot fill a buffer.
        socket.resume();
        socket.setNoDelay(true);
        resolve(socket);
      });
    });
  }

  #bindDatagram(): Promise<UdpSocket> {
    const { host, port } = hostPort(this.#address);
    const socket = createSocket(isIPv6(host) ? 'udp6' : 'udp4');
    // Connected, so a collector that is not listening is reported (ECONNREFUSED) by the sends after it.
    return new Promise((resolve, reject) => {
      const fail = (err: Error) => {
        socket.close();
        reject(withoutTarget(err));
      };
      socket.once('error', fail);
      socket.connect(port, host, () => {
        socket.off('error', fail);
        socket.on('error', () => undefined);
        resolve(socket);
      });
    });
  }

  #drop(): void {
    this.#stream?.destroy();
    this.#stream = undefined;
    this.#datagram?.close();
    this.#datagram = undefined;
  }
}

/** `host:port` or `[v6]:port`; the port is checked when the device is enabled. */
export function hostPort(address: string): { host: string; port: number } {
  const i = address.lastIndexOf(':');
  return { host: address.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(address.slice(i + 1)) };
}
