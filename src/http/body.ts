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
      throw new BadRequestError(`failed to parse JSON input: ${(err as Error).message}`);
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
  for (const [k, v] of new URLSearchParams(search)) {
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}
