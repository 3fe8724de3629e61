/**
 * One error type for what the Azure provider throws. `kind` decides the status the engine answers:
 * an Azure outage, refusal or bad root credential is 502, throttling that outlived the retries is 429,
 * and a missing object or a value Azure rejects from the caller's config is 400. Messages are scrubbed
 * of secrets, tokens and assertions before they are wrapped.
 */
import { StrongroomError } from '../../core/errors.ts';

export type AzureErrorKind = 'upstream' | 'throttled' | 'not-found' | 'input';

const STATUS: Record<AzureErrorKind, number> = { upstream: 502, throttled: 429, 'not-found': 400, input: 400 };

export class AzureProviderError extends StrongroomError {
  readonly kind: AzureErrorKind;
  /** HTTP status Azure answered with, when it answered. */
  readonly upstreamStatus: number | undefined;
  /** Graph/ARM error code (`Request_ResourceNotFound`, `PrincipalNotFound`) or AADSTS code. */
  readonly code: string | undefined;
  constructor(kind: AzureErrorKind, message: string, upstream: { status?: number; code?: string } = {}) {
    super(STATUS[kind], message);
    this.name = 'AzureProviderError';
    this.kind = kind;
    this.upstreamStatus = upstream.status;
    this.code = upstream.code;
  }
}

/** Values and shapes that must never leave the process in a message or a log line. */
const SECRET_PATTERNS: Array<[RegExp, string]> = [
  [/\b(client_secret|client_assertion|access_token|refresh_token|assertion)=[^&\s"']+/gi, '$1=[redacted]'],
  [/("(?:client_secret|clientSecret|secretText|access_token|accessToken|client_assertion|token)"\s*:\s*")[^"]*"/gi, '$1[redacted]"'],
  [/(authorization["']?\s*[:=]\s*["']?)(?:bearer\s+)?[^\s"',}]+/gi, '$1[redacted]'],
  [/\bbearer\s+[\w\-.~+/]+=*/gi, 'Bearer [redacted]'],
  // Compact JWTs (tokens, assertions) wherever they appear.
  [/\beyJ[\w-]*\.[\w-]*\.[\w-]*/g, '[redacted-jwt]'],
];

export function redact(text: string, secrets: Iterable<string | undefined> = []): string {
  const exact = [...new Set([...secrets].filter((s): s is string => !!s && s.length >= 4))].sort((a, b) => b.length - a.length);
  let out = text;
  for (const s of exact) out = out.split(s).join('[redacted]');
  for (const [re, rep] of SECRET_PATTERNS) out = out.replace(re, rep);
  return out;
}

export interface UpstreamInfo {
  status: number | undefined;
  code: string | undefined;
  message: string;
  retryAfterMs: number | undefined;
  /** No HTTP answer at all (socket, DNS, TLS, timeout). */
  network: boolean;
}

function header(headers: unknown, name: string): string | undefined {
  if (!headers) return undefined;
  const h = headers as { get?: (n: string) => string | null | undefined } & Record<string, unknown>;
  if (typeof h.get === 'function') return h.get(name) ?? undefined;
  const v = h[name] ?? h[name.toLowerCase()];
  return typeof v === 'string' ? v : undefined;
}

/** Retry-After in seconds or as an HTTP date; `retry-after-ms` (ARM) wins when present. */
export function parseRetryAfter(headers: unknown, now = Date.now()): number | undefined {
  const ms = header(headers, 'retry-after-ms') ?? header(headers, 'x-ms-retry-after-ms');
  if (ms !== undefined && /^\d+$/.test(ms.trim())) return Number(ms);
  const v = header(headers, 'retry-after');
  if (v === undefined) return undefined;
  if (/^\d+(\.\d+)?$/.test(v.trim())) return Math.round(Number(v) * 1000);
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

const NETWORK_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_SOCKET', 'UND_ERR_CONNECT_TIMEOUT', 'REQUEST_SEND_ERROR']);

/**
 * Normalises what the three SDKs throw: GraphError (statusCode, code, headers), core RestError
 * (statusCode, code, response.headers), @azure/identity AuthenticationError (statusCode,
 * errorResponse) and plain network errors.
 */
export function describeUpstream(err: unknown): UpstreamInfo {
  if (err instanceof AzureProviderError) {
    return { status: err.upstreamStatus, code: err.code, message: err.message, retryAfterMs: undefined, network: false };
  }
  const e = (err ?? {}) as Record<string, unknown>;
  const rawStatus = typeof e.statusCode === 'number' ? e.statusCode : typeof e.status === 'number' ? e.status : undefined;
  const status = rawStatus !== undefined && rawStatus > 0 ? rawStatus : undefined;
  let code = typeof e.code === 'string' ? e.code : undefined;
  let message = typeof e.message === 'string' ? e.message : String(err);
  const errorResponse = e.errorResponse as { error?: string; errorDescription?: string; errorCodes?: number[] } | undefined;
  const aadsts = /AADSTS(\d+)/.exec(errorResponse?.errorDescription ?? message);
  if (aadsts) {
    code = `AADSTS${aadsts[1]}`;
    // Keep the sentence that says what is wrong; drop trace/correlation ids and timestamps.
    const desc = (errorResponse?.errorDescription ?? message).slice(aadsts.index).split(/\s+Trace ID:|\r?\n/)[0];
    message = `authentication to Azure failed: ${desc.trim()}`;
  }
  const response = e.response as { headers?: unknown } | undefined;
  const retryAfterMs = parseRetryAfter(e.headers ?? response?.headers);
  const network = status === undefined && !aadsts && (NETWORK_CODES.has(code ?? '') || NETWORK_CODES.has(String((e.cause as { code?: unknown } | undefined)?.code ?? '')) || e.name === 'FetchError' || /fetch failed|socket hang up|ECONNRESET|ECONNREFUSED/i.test(message));
  return { status, code, message, retryAfterMs, network };
}

/** Codes meaning "the object you named does not exist", the caller's problem when it named it. */
const NOT_FOUND_CODES = new Set(['Request_ResourceNotFound', 'ResourceNotFound', 'RoleDefinitionDoesNotExist', 'RoleAssignmentNotFound', 'SubscriptionNotFound', 'ResourceGroupNotFound']);
const INPUT_CODES = new Set(['Request_BadRequest', 'InvalidRoleAssignmentId', 'InvalidResourceId', 'InvalidScope', 'InvalidFilterInQueryString', 'Request_UnsupportedQuery', 'MissingSubscription', 'InvalidSubscriptionId']);

/** Wraps anything an SDK threw as an AzureProviderError whose message names the operation. */
export function toProviderError(err: unknown, operation: string, secrets: Iterable<string | undefined> = []): AzureProviderError {
  if (err instanceof AzureProviderError) return err;
  const info = describeUpstream(err);
  const text = redact(`${operation}: ${info.code && !info.message.includes(info.code) ? `${info.code}: ` : ''}${info.message}`, secrets);
  let kind: AzureErrorKind = 'upstream';
  if (info.status === 429) kind = 'throttled';
  else if (info.code?.startsWith('AADSTS')) kind = 'upstream';
  else if (info.status === 404 || (info.code !== undefined && NOT_FOUND_CODES.has(info.code))) kind = 'not-found';
  else if (info.status === 400 && info.code !== undefined && INPUT_CODES.has(info.code)) kind = 'input';
  return new AzureProviderError(kind, text, { status: info.status, code: info.code });
}

export function isNotFound(err: unknown): boolean {
  const info = describeUpstream(err);
  return info.status === 404 || (info.code !== undefined && NOT_FOUND_CODES.has(info.code));
}
