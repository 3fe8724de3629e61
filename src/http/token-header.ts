import type { IncomingHttpHeaders } from 'node:http';

/** X-Service-Token first, then Vault clients' X-Vault-Token, then `Authorization: Bearer <token>`. */
export function tokenFromHeaders(headers: IncomingHttpHeaders): string | undefined {
  const pick = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v)?.trim() || undefined;
  const direct = pick(headers['x-service-token']) ?? pick(headers['x-vault-token']);
  if (direct) return direct;
  const auth = pick(headers.authorization);
  return auth?.startsWith('Bearer ') ? auth.slice('Bearer '.length).trim() || undefined : undefined;
}
