/**
 * Event delivery over HTTP (docs/events.md): `GET /v1/sys/events/subscribe/:event_type?json=true` as a WebSocket,
 * Vault's API, and `GET /v1/sys/events/stream/:event_type` as Server-Sent Events. Both run the same subscription
 * (src/core/events/subscription.ts); this file only admits the request and carries the events.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import type { WebSocket, WebSocketServer } from 'ws';
import type { Core } from '../core/core.ts';
import { BadRequestError, PermissionDeniedError, StrongroomError } from '../core/errors.ts';
import { parseFilter } from '../core/events/filter.ts';
import { runSubscription, type SubscriberSink, type SubscriptionSpec } from '../core/events/subscription.ts';
import type { Acl } from '../core/policy/acl.ts';
import { storageRefusal } from '../core/storage/types.ts';
import { ws as wsModule } from '../lib/first-use.ts';
import { tokenFromHeaders } from './token-header.ts';

const SUBSCRIBE_PREFIX = '/v1/sys/events/subscribe/';
const STREAM_PREFIX = '/v1/sys/events/stream/';
const MAX_EVENT_TYPE = 256;
/** WebSocket close codes: the server ended the subscription (application range, RFC 6455 7.4.2). */
const CLOSE_OVERFLOW = 4000;
const CLOSE_UNAUTHORISED = 4001;

interface Admitted {
  spec: SubscriptionSpec;
  authorise: () => Promise<Acl | undefined>;
}

/**
 * Checks a subscription request the way Vault does: a valid token with `read` on `sys/events/subscribe/<type>` (or
 * `sys/events/stream/<type>`), JSON only, a filter that parses, a resume point that is a sequence number.
 */
async function admit(core: Core, url: URL, headers: IncomingMessage['headers'], prefix: string, lastEventId?: string): Promise<Admitted> {
  const refused = storageRefusal(core.barrier);
  if (refused) throw refused;
  if (core.sealed) throw new StrongroomError(503, 'Vault is sealed');
  const pattern = decodeURIComponent(url.pathname.slice(prefix.length));
  if (pattern === '' || pattern.length > MAX_EVENT_TYPE) throw new BadRequestError(`event_type: between 1 and ${MAX_EVENT_TYPE} characters`);
  const query = url.searchParams;
  if (prefix === SUBSCRIBE_PREFIX && query.get('json') !== 'true') throw new BadRequestError('json: only JSON events are offered; subscribe with json=true');
  const filter = parseFilter(query.get('filter') ?? '');
  const resume = query.get('after') ?? lastEventId;
  if (resume !== undefined && resume !== null && !/^\d{1,15}$/.test(resume)) throw new BadRequestError('after: a sequence number (a non-negative integer)');
  const token = tokenFromHeaders(headers);
  const authorise = async (): Promise<Acl | undefined> => {
    const entry = token === undefined ? undefined : await core.tokens.lookup(token);
    return entry && core.policies.aclFor(entry.policies);
  };
  const acl = await authorise();
  if (!acl || !acl.allowOperation(`${prefix.slice('/v1/'.length)}${pattern}`, 'read').allowed) throw new PermissionDeniedError();
  return { spec: { pattern, filter, after: resume === undefined || resume === null ? undefined : Number(resume) }, authorise };
}

function errorStatus(err: unknown): { status: number; message: string } {
  if (err instanceof StrongroomError) return { status: err.status, message: err.message };
  return { status: 500, message: 'internal error' };
}

/** Registers both endpoints on the app's server. */
export function eventStreams(app: FastifyInstance, core: Core): void {
  // Made at the first upgrade: `ws` is no part of a start.
  let sockets: WebSocketServer | undefined;
  app.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const url = new URL(req.url ?? '/', 'http://strongroom');
    if (!url.pathname.startsWith(SUBSCRIBE_PREFIX)) return socket.destroy();
    admit(core, url, req.headers, SUBSCRIBE_PREFIX).then(
      ({ spec, authorise }) => {
        sockets ??= new (wsModule().WebSocketServer)({ noServer: true, maxPayload: 4096 });
        sockets.handleUpgrade(req, socket, head, (ws) => serveSocket(core, ws, spec, authorise));
      },
      (err: unknown) => {
        const { status, message } = errorStatus(err);
        const body = JSON.stringify({ errors: [message] });
        socket.end(`HTTP/1.1 ${status} ${status === 400 ? 'Bad Request' : status === 403 ? 'Forbidden' : 'Error'}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      },
    );
  });
  app.addHook('onClose', async () => {
    for (const ws of sockets?.clients ?? []) ws.terminate();
    sockets?.close();
  });

  app.get(`${STREAM_PREFIX}*`, async (req, reply) => {
    const url = new URL(req.url, 'http://strongroom');
    const lastEventId = req.headers['last-event-id'];
    const { spec, authorise } = await admit(core, url, req.headers, STREAM_PREFIX, Array.isArray(lastEventId) ? lastEventId[0] : lastEventId);
    reply.hijack();
    serveStream(core, reply.raw, spec, authorise);
  });
}

function serveSocket(core: Core, ws: WebSocket, spec: SubscriptionSpec, authorise: () => Promise<Acl | undefined>): void {
  const done = new AbortController();
  ws.on('close', () => done.abort());
  ws.on('error', () => done.abort());
  const sink: SubscriberSink = {
    send: (event) => ws.send(JSON.stringify(event)),
    buffered: () => ws.bufferedAmount,
    close: (kind, reason) => ws.close(kind === 'overflow' ? CLOSE_OVERFLOW : CLOSE_UNAUTHORISED, reason),
  };
  void runSubscription(core.events.feed, spec, authorise, sink, done.signal, core.events.outbox.counters).catch(() => ws.terminate());
}

function serveStream(core: Core, res: ServerResponse, spec: SubscriptionSpec, authorise: () => Promise<Acl | undefined>): void {
  const done = new AbortController();
  res.on('close', () => done.abort());
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
  res.flushHeaders();
  const sink: SubscriberSink = {
    // The id is the sequence: a client that reconnects sends it back as Last-Event-ID and resumes after it.
    send: (event) => res.write(`id: ${event.sequence}\nevent: ${event.data.event_type}\ndata: ${JSON.stringify(event)}\n\n`),
    buffered: () => res.writableLength,
    close: (kind, reason) => res.end(`event: ${kind === 'overflow' ? 'overflow' : 'unauthorised'}\ndata: ${JSON.stringify({ reason })}\n\n`),
  };
  void runSubscription(core.events.feed, spec, authorise, sink, done.signal, core.events.outbox.counters).catch(() => res.destroy());
}
