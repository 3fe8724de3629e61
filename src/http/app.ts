import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyServerOptions } from 'fastify';
import type { Logger } from 'pino';
import type { Core } from '../core/core.ts';
import type { CoreResponse, ServedRequest } from '../core/request.ts';
import { PayloadTooLargeError, StrongroomError } from '../core/errors.ts';
import { accessLog } from './access-log.ts';
import { eventStreams } from './events-stream.ts';
import { cappedBody, storageUnavailable } from './admission.ts';
import { OUTSIDE_API, parseBody, parseQuery, splitTarget } from './body.ts';
import { answerListFromRawPacket } from './list-method.ts';
import { tokenFromHeaders } from './token-header.ts';
import { registerConsole } from './ui.ts';

export interface AppOptions {
  logger: Logger;
  /** The body limit for a request with a valid token. */
  maxRequestSize: number;
  /** The body limit for anyone else (no token, or one the store does not know); capped at `maxRequestSize`. */
  maxUnauthenticatedRequestSize: number;
  timeouts: {
    /** From a connection's first byte (or its last answer) until the request's headers have arrived. */
    headersMs: number;
    /** Until the whole request, body included, has arrived. */
    requestMs: number;
    /** An idle keep-alive connection is closed after this long. */
    keepAliveMs: number;
  };
  https?: { cert: Buffer; key: Buffer };
}

/**
 * Node checks its timeouts by sweeping connections this often (30 s by default), so a connection may outlive its
 * bound by up to one interval; a sweep walks a list, which is cheap even with thousands of connections.
 */
const TIMEOUT_CHECK_INTERVAL_MS = 1000;
/**
 * Client errors that are not a bad request, answered as Node's own handler would; anything else is a 400. Each gets
 * a message in the usual error body (docs/decisions.md: every error body carries one).
 */
const CLIENT_ERROR_STATUS: Record<string, [string, string]> = {
  ERR_HTTP_REQUEST_TIMEOUT: ['408 Request Timeout', 'the request did not arrive within the request timeout'],
  HPE_HEADER_OVERFLOW: ['431 Request Header Fields Too Large', 'the request headers are too large'],
  HPE_INVALID_METHOD: ['400 Bad Request', 'unsupported HTTP method'],
};
const MALFORMED: [string, string] = ['400 Bad Request', 'malformed HTTP request'];
const noSchemas = (): never => {
  throw new Error('routes take no JSON schema here: requests are validated by the core');
};

/**
 * One catch-all `/v1/*` route feeds the core pipeline: mounts are enabled at run time and Fastify cannot add
 * routes after start, so routing below `/v1/` belongs to the core. `build` is separate from `listen` so tests
 * can use `inject`.
 */
export function buildApp(core: Core, opts: AppOptions): FastifyInstance {
  const logAccess = accessLog(opts.logger);
  const anonymousLimit = Math.min(opts.maxUnauthenticatedRequestSize, opts.maxRequestSize);
  // A request that has not fully arrived in time is answered 408 and its connection closed: without a bound, a
  // client sending a body one byte at a time (or never) holds its connection forever (Fastify's default is none).
  // Once a request has arrived nothing times out its connection (Fastify's connectionTimeout stays 0): a handler
  // waiting on a slow directory leaves the socket idle, and upstream calls carry their own timeouts.
  const timeouts = {
    headersTimeout: opts.timeouts.headersMs,
    requestTimeout: opts.timeouts.requestMs,
    keepAliveTimeout: opts.timeouts.keepAliveMs,
    connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
  };
  const serverOptions: FastifyServerOptions = {
    loggerInstance: opts.logger,
    bodyLimit: opts.maxRequestSize,
    // Node's server takes them all (below); Fastify sets these two again from its own options after creating it.
    requestTimeout: timeouts.requestTimeout,
    keepAliveTimeout: timeouts.keepAliveTimeout,
    // Fastify's per-request lines would log raw URLs (query strings may carry tokens); onResponse below logs
    // the path alone.
    logController: new LogController({ disableRequestLogging: true }),
    // Fastify would make a pino child (with our redaction rules) for every request; nothing logs through it.
    childLoggerFactory: (logger) => logger,
    // No route here declares a JSON schema (the core validates what it is sent), so Fastify's ajv and
    // fast-json-stringify compilers, ~270 modules it would otherwise load while the app is built, are never wanted;
    // a route that declared a schema would fail to register rather than go unchecked.
    schemaController: { compilersFactory: { buildValidator: noSchemas, buildSerializer: noSchemas } },
    clientErrorHandler(err, socket) {
      if (answerListFromRawPacket(core, err as unknown as Parameters<typeof answerListFromRawPacket>[1], socket, { maxBytes: opts.maxRequestSize, logAccess })) return;
      const [status, message] = CLIENT_ERROR_STATUS[(err as NodeJS.ErrnoException).code ?? ''] ?? MALFORMED;
      const body = JSON.stringify({ errors: [message] });
      if (socket.writable) socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Type: application/json\r\nCache-Control: no-store\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      else socket.destroy(err);
    },
  };
  const app = (opts.https ? Fastify({ ...serverOptions, https: { ...opts.https, ...timeouts } } as FastifyServerOptions) : Fastify({ ...serverOptions, http: timeouts })) as unknown as FastifyInstance;

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  // Admission, before any body is read. sys/health answers for itself (503, with the fields monitors parse).
  // A body is held and parsed before the core sees the token, so its size is bounded first: a body no larger
  // than the anonymous limit passes on its declared length alone; a larger or undeclared (chunked) one costs a
  // token lookup, and without a valid token gets the anonymous limit. Fastify's bodyLimit is the limit for the
  // rest. Callback style (an async hook costs every request a promise): only the token lookup waits.
  app.addHook('preParsing', (req, reply, payload, done) => {
    const refused = storageUnavailable(core);
    if (refused && req.url.split('?', 1)[0] !== '/v1/sys/health') return done(refused);
    const declared = req.headers['content-length'];
    if (declared === undefined ? req.headers['transfer-encoding'] === undefined : Number(declared) <= anonymousLimit) return done(null, payload);
    const token = tokenFromHeaders(req.headers);
    (token === undefined ? Promise.resolve(undefined) : core.tokens.lookup(token)).then((entry) => {
      if (entry) return done(null, payload);
      if (declared === undefined) return done(null, cappedBody(payload, anonymousLimit));
      // Refused unread: the connection closes rather than read the rest to keep it alive.
      reply.header('connection', 'close');
      done(new PayloadTooLargeError(anonymousLimit));
    }, done);
  });

  // The access log line; none at a quieter level (see accessLog), so no hook either.
  if (logAccess) {
    app.decorateReply('served', null);
    app.addHook('onResponse', (req, reply, done) => {
      logAccess(req.method, req.url, reply.statusCode, reply.elapsedTime, reply.served ?? undefined);
      done();
    });
  }

  // Every answer leaves through the route handler, the error handler or the not-found handler, and each sets
  // Cache-Control: secrets must not be cached (only raw answers with their own policy, public OIDC keys, differ).
  // Serialised here and sent as bytes: Fastify appends `; charset=utf-8` to a JSON type whenever the payload is a
  // string or an object, and Vault sends exactly application/json, which strict clients compare whole.
  const fail = (reply: FastifyReply, status: number, errors: string[]) =>
    reply.status(status).header('cache-control', 'no-store').header('content-type', 'application/json').send(Buffer.from(JSON.stringify({ errors })));
  app.setErrorHandler((err: unknown, _req, reply) => {
    const e = err as { statusCode?: number; code?: string; message?: string };
    if (err instanceof StrongroomError) return fail(reply, err.status, err.messages);
    if (e.code === 'FST_ERR_CTP_BODY_TOO_LARGE') return fail(reply, 413, new PayloadTooLargeError(opts.maxRequestSize).messages);
    if (e.statusCode && e.statusCode >= 400 && e.statusCode < 500) return fail(reply, e.statusCode, [e.message ?? 'bad request']);
    opts.logger.error({ err }, 'unhandled error');
    return fail(reply, 500, ['internal error']);
  });

  app.setNotFoundHandler((_req, reply) => fail(reply, 404, [OUTSIDE_API]));
  eventStreams(app, core);
  registerConsole(app);

  app.route({
    method: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH'],
    url: '/v1/*',
    handler: async (req, reply) => {
      const target = splitTarget(req.url);
      if (!target) return fail(reply, 404, [OUTSIDE_API]);
      const res = await core.handle({
        method: req.method,
        path: target.path,
        query: parseQuery(target.search),
        body: req.body as Record<string, unknown> | undefined,
        token: tokenFromHeaders(req.headers),
        remoteAddress: req.ip,
        remotePort: req.socket.remotePort,
        wrapTtl: firstHeader(req.headers['x-vault-wrap-ttl']),
        disconnected: () => closedBeforeAnswer(reply.raw),
      });
      await endOfTurn();
      if (logAccess) reply.served = res.served ?? null;
      return sendCoreResponse(reply, res);
    },
  });
  return app;
}

declare module 'fastify' {
  interface FastifyReply {
    /** What the core made of the request, for its access log line. */
    served: ServedRequest | null;
  }
}

const firstHeader = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

/** Aborted when the connection closes before the answer was written (a client that gave up waiting). */
function closedBeforeAnswer(res: FastifyReply['raw']): AbortSignal {
  const controller = new AbortController();
  res.once('close', () => {
    // Answered (headers out) is not gone: an in-process request (inject) closes without ever finishing its stream.
    if (!res.writableFinished && !res.headersSent) controller.abort();
  });
  return controller.signal;
}

let turnEnd: Promise<void> | undefined;
/**
 * Resolves once the event loop has handled the I/O of this turn (setImmediate runs after the poll phase), the same
 * promise for every caller of the turn. Answers wait for it and then leave back to back: each socket write that
 * finds the client asleep pays its wake-up (on a virtual machine an interrupt to another CPU, more than the rest of
 * a request's work), and a burst wakes it once. Measured against a keep-alive load generator on 2 vCPUs: server
 * CPU per authenticated read 37 -> 27-29 us, throughput +30-35%. The cost is one event-loop turn of latency.
 */
function endOfTurn(): Promise<void> {
  return (turnEnd ??= new Promise((resolve) => setImmediate(() => {
    turnEnd = undefined;
    resolve();
  })));
}

const asIs = (body: string) => body;

function sendCoreResponse(reply: FastifyReply, res: CoreResponse) {
  reply.status(res.status).headers(res.headers);
  if (res.headers['cache-control'] === undefined) reply.header('cache-control', 'no-store');
  if (typeof res.body !== 'string') return reply.send(res.body ?? null);
  return reply.serializer(asIs).send(res.body);
}
