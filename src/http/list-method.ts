import type { Socket } from 'node:net';
import type { Core } from '../core/core.ts';
import type { CoreResponse } from '../core/request.ts';
import type { AccessLog } from './access-log.ts';
import { storageUnavailable } from './admission.ts';
import { OUTSIDE_API, parseQuery, splitTarget } from './body.ts';
import { tokenFromHeaders } from './token-header.ts';

/**
 * Node's HTTP parser (llhttp) rejects the `LIST` method with HPE_INVALID_METHOD before any framework sees the
 * request, yet every Vault client sends it. The rejected bytes arrive on `clientError` as `rawPacket`: parse the
 * request line and headers, run them through the same pipeline as a list, and answer on the socket, closing it.
 * The answer gets the access log line Fastify's hook would have written.
 */
export function answerListFromRawPacket(
  core: Core, err: NodeJS.ErrnoException & { rawPacket?: Buffer }, socket: Socket,
  { maxBytes, logAccess }: { maxBytes: number; logAccess: AccessLog | undefined },
): boolean {
  if (err.code !== 'HPE_INVALID_METHOD' || !err.rawPacket) return false;
  const started = performance.now();
  const raw = err.rawPacket.subarray(0, maxBytes).toString('latin1');
  const head = raw.split('\r\n\r\n', 1)[0];
  const [requestLine, ...headerLines] = head.split('\r\n');
  const m = /^LIST (\S+) HTTP\/1\.[01]$/.exec(requestLine ?? '');
  if (!m) return false;
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  const send = (res: CoreResponse) => {
    writeRaw(socket, res);
    logAccess?.('LIST', m[1], res.status, performance.now() - started, res.served);
  };
  const fail = (status: number, errors: string[]) => send({ status, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ errors }) });
  let target: ReturnType<typeof splitTarget>;
  try {
    target = splitTarget(m[1]);
  } catch (err) {
    fail(400, [(err as Error).message]);
    return true;
  }
  if (!target) {
    fail(404, [OUTSIDE_API]);
    return true;
  }
  const refused = storageUnavailable(core);
  if (refused) {
    fail(refused.status, refused.messages);
    return true;
  }
  void core
    .handle({ method: 'LIST', path: target.path, query: parseQuery(target.search), body: undefined, token: tokenFromHeaders(headers), wrapTtl: headers['x-vault-wrap-ttl'], remoteAddress: socket.remoteAddress ?? '', remotePort: socket.remotePort })
    .then(send, () => fail(500, ['internal error']));
  return true;
}

function writeRaw(socket: Socket, res: CoreResponse): void {
  if (socket.destroyed) return;
  const body = res.body === undefined ? Buffer.alloc(0) : Buffer.from(res.body);
  const headers = { ...res.headers, 'cache-control': 'no-store', 'content-length': String(body.length), connection: 'close' };
  // Read through getBuiltinModule for the reason src/core/errors.ts gives (an ESM import of node:http loads undici).
  const lines = [`HTTP/1.1 ${res.status} ${process.getBuiltinModule('node:http').STATUS_CODES[res.status] ?? ''}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
  socket.end(Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]));
}
