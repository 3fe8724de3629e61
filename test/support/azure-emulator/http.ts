// Routing primitives shared by the emulated services. Each service registers its routes on its own
// Router, so a Graph path sent to the ARM origin is a 404 exactly as it would be in Azure.
import type { IncomingHttpHeaders } from 'node:http';
import type { EmulatorState } from './state.ts';
import type { TokenService } from './entra.ts';
import type { Faults } from './faults.ts';

export type ServiceName = 'login' | 'graph' | 'arm';

export interface EmulatorRequest {
  service: ServiceName;
  method: string;
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  rawBody: string;
  params: Record<string, string>;
  /** Who made the call, filled in once a bearer token or client credential is verified (request log). */
  caller?: { appId: string; oid: string };
}

export interface EmulatorResponse {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export type Handler = (req: EmulatorRequest) => EmulatorResponse | Promise<EmulatorResponse>;

export interface ServiceUrls {
  login: string;
  graph: string;
  arm: string;
}

export interface ServiceContext {
  state: EmulatorState;
  tokens: TokenService;
  faults: Faults;
  urls: ServiceUrls;
  /** Rows per page for every list, small in tests so @odata.nextLink paging is exercised. */
  pageSize: number;
}

interface Route {
  method: string;
  pattern: RegExp;
  handler: Handler;
}

export type RouteMatch =
  | { kind: 'found'; handler: Handler; params: Record<string, string> }
  | { kind: 'method-not-allowed' }
  | { kind: 'not-found' };

/** `/v1.0/groups/:id/members/$ref` → anchored regex with named groups; `$` and `.` are literal. */
function compile(pattern: string): RegExp {
  const source = pattern
    .split('/')
    .map((seg) => (seg.startsWith(':') ? `(?<${seg.slice(1)}>[^/]+)` : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${source}$`);
}

export class Router {
  readonly #routes: Route[] = [];

  add(method: string, pattern: string | RegExp, handler: Handler): this {
    this.#routes.push({ method, pattern: typeof pattern === 'string' ? compile(pattern) : pattern, handler });
    return this;
  }

  match(method: string, path: string): RouteMatch {
    let pathMatched = false;
    for (const route of this.#routes) {
      const m = route.pattern.exec(path);
      if (!m) continue;
      pathMatched = true;
      if (route.method !== method) continue;
      const params: Record<string, string> = {};
      for (const [k, v] of Object.entries(m.groups ?? {})) params[k] = v === undefined ? '' : decodeURIComponent(v);
      return { kind: 'found', handler: route.handler, params };
    }
    return pathMatched ? { kind: 'method-not-allowed' } : { kind: 'not-found' };
  }
}

export function json(status: number, body?: unknown, headers?: Record<string, string>): EmulatorResponse {
  return { status, body, headers };
}

export function parseJsonBody(req: EmulatorRequest): Record<string, unknown> | undefined {
  if (req.rawBody.trim() === '') return {};
  try {
    const v: unknown = JSON.parse(req.rawBody);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Pages an in-memory list; the skip token is opaque to clients but just an offset here. */
export function page<T>(
  items: T[],
  req: EmulatorRequest,
  baseUrl: string,
  defaultPageSize: number,
  maxTop: number,
): { rows: T[]; nextLink?: string } {
  const topRaw = req.query.get('$top');
  const top = topRaw === null ? defaultPageSize : Math.min(Math.max(Number.parseInt(topRaw, 10) || defaultPageSize, 1), maxTop);
  const skipToken = req.query.get('$skiptoken');
  const offset = skipToken === null ? 0 : Number.parseInt(Buffer.from(skipToken, 'base64url').toString('utf8'), 10) || 0;
  const rows = items.slice(offset, offset + top);
  if (offset + top >= items.length) return { rows };
  const next = new URLSearchParams(req.query);
  next.set('$skiptoken', Buffer.from(String(offset + top), 'utf8').toString('base64url'));
  return { rows, nextLink: `${baseUrl}${req.path}?${next.toString()}` };
}

/** OData string literal: `'it''s'` → `it's`; undefined when the literal is malformed. */
export function parseODataEq(filter: string): { field: string; value: string } | undefined {
  const m = /^\s*([A-Za-z][\w/]*)\s+eq\s+'((?:[^']|'')*)'\s*$/.exec(filter);
  return m ? { field: m[1], value: m[2].replace(/''/g, "'") } : undefined;
}
