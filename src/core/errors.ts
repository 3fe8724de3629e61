// Not `import ... from 'node:http'`: an ESM import of it builds a facade that reads every export, and one of them
// loads Node's fetch implementation (undici), ~30 ms of CPU at start for a table of status texts.
const { STATUS_CODES } = process.getBuiltinModule('node:http');

/**
 * Typed errors carry their HTTP status; the HTTP layer renders them in exactly one place.
 * Messages must never contain secrets: callers scrub upstream text before wrapping it.
 */
export class StrongroomError extends Error {
  readonly status: number;
  readonly messages: string[];
  /** Response headers the answer carries (e.g. Retry-After); never a secret. */
  headers: Record<string, string> | undefined;
  constructor(status: number, messages: string | string[]) {
    // Every error body carries at least one message (docs/decisions.md): an empty list gets the status's own words.
    const given = Array.isArray(messages) ? messages : [messages];
    const list = given.length > 0 ? given : [(STATUS_CODES[status] ?? 'error').toLowerCase()];
    super(list.join('; '));
    this.status = status;
    this.messages = list;
  }
}

export class BadRequestError extends StrongroomError {
  constructor(messages: string | string[]) { super(400, messages); }
}
/**
 * The one way to refuse a field's value: the message names the field and the rule, never the value, which may be a
 * secret sent in the wrong field (a password where a DN belongs) and would otherwise reach the client, the server
 * log, an audit entry's error and the bootstrap's report in the clear.
 */
export function invalidField(name: string, rule: string): BadRequestError {
  return new BadRequestError(`invalid value for field "${name}": ${rule}`);
}

export class PermissionDeniedError extends StrongroomError {
  constructor(message = 'permission denied') { super(403, message); }
}
export class NotFoundError extends StrongroomError {
  constructor(messages: string | string[] = []) { super(404, messages); }
}
export class UnsupportedOperationError extends StrongroomError {
  constructor() { super(405, 'unsupported operation'); }
}
export class ConflictError extends StrongroomError {
  constructor(message: string) { super(409, message); }
}
export class PayloadTooLargeError extends StrongroomError {
  constructor(limit: number) { super(413, `request body exceeds the limit of ${limit} bytes`); }
}
export class ThrottledError extends StrongroomError {
  constructor(message: string) { super(429, message); }
}
export class UpstreamError extends StrongroomError {
  constructor(message: string) { super(502, message); }
}
export class SealedError extends StrongroomError {
  constructor() { super(503, 'Strongroom is sealed'); }
}

export function isStrongroomError(err: unknown): err is StrongroomError {
  return err instanceof StrongroomError;
}
