import { BadRequestError } from '../core/errors.ts';

/**
 * Request bodies are JSON objects whatever the Content-Type says (Vault clients are loose about it); a
 * form-encoded body is accepted when it does not start like JSON. Anything else is a 400.
 */
export function parseBody(raw: string): Record<string, unknown> | undefined {
  const text = raw.trim();
  if (text === '') return undefined;
  if (text.startsWith('{') || text.startsWith('[') || !text.includes('=')) {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      // Node's message quotes the text around the error, which may be a secret: only where it is.
      const at = /position (\d+)/.exec((err as Error).message)?.[1];
      throw new BadRequestError(`failed to parse JSON input: the body is not valid JSON${at ? ` (at character ${at})` : ''}`);
    }
    if (value === null || typeof value !== 'object' || Array.isArray(value)) throw new BadRequestError('failed to parse JSON input: the body must be a JSON object');
    return value as Record<string, unknown>;
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of new URLSearchParams(text)) out[k] = k in out ? `${out[k]},${v}` : v;
  return out;
}

export function parseQuery(search: string): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  // Most requests send none, and URLSearchParams costs an object and an iterator even for nothing.
  if (search === '') return out;
  for (const [k, v] of new URLSearchParams(search)) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

/** The answer to a request outside the API, which splitTarget does not take. */
export const OUTSIDE_API = 'no handler for this route: every API path starts with /v1/';

/**
 * Splits a raw request target into the decoded path below `/v1/` and the query string. WHATWG URL parsing
 * would resolve `..` and `%2e%2e` segments away, hiding them from the path check, so the path is decoded
 * by hand. Returns undefined for targets outside `/v1/`; throws a 400 on broken percent-encoding.
 */
export function splitTarget(target: string): { path: string; search: string } | undefined {
  const q = target.indexOf('?');
  const rawPath = q === -1 ? target : target.slice(0, q);
  if (!rawPath.startsWith('/v1/')) return undefined;
  let path = rawPath.slice('/v1/'.length);
  // Without a '%' there is nothing to decode (decodeURIComponent would return the same string).
  if (path.includes('%')) {
    try {
      path = decodeURIComponent(path);
    } catch {
      throw new BadRequestError('the request path is not valid percent-encoding');
    }
  }
  return { path, search: q === -1 ? '' : target.slice(q) };
}
