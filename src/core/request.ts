/**
 * A request as the core takes it from a transport (the HTTP layer, the bootstrap) and the answer it gives back: the
 * one contract between the core, the transports and what observes requests (audit, metrics, the access log).
 */
import type { Operation } from './framework.ts';

export interface CoreRequest {
  method: string;
  /** Path after `/v1/`, percent-decoded. */
  path: string;
  query: Record<string, string | string[]>;
  body: Record<string, unknown> | undefined;
  token: string | undefined;
  remoteAddress: string;
  remotePort?: number;
  /** Vault's X-Vault-Wrap-TTL as sent: the answer is to be wrapped (src/core/wrapping.ts). */
  wrapTtl?: string;
  /** A signal aborted once the client has gone (its connection closed before the answer): transports that can tell. */
  disconnected?: () => AbortSignal;
}

export interface CoreResponse {
  status: number;
  headers: Record<string, string>;
  body: string | Buffer | undefined;
  /** What the request turned out to be, for the access log (set by `handle`). */
  served?: ServedRequest;
}

/** What the core learns of a request as it handles it: labels for its metrics and fields of its access log line. */
export interface ServedRequest {
  id: string;
  /** The mount it was routed to ("ldap/"), if any. */
  mount: string | undefined;
  operation: Operation | undefined;
  /** A request to an auth method's login path. */
  login: boolean;
}
