// The token and its life in the page (docs/console.md, "Security model"): held in this module's memory, copied to
// sessionStorage only when the operator ticks "remember in this tab", never to localStorage, a cookie or a URL;
// renewed at half its TTL while the page is used; dropped after IDLE_MS without a key press or a click.

const REMEMBER_KEY = 'strongroom.console.token';
export const IDLE_MS = 15 * 60 * 1000;
const CHECK_MS = 5_000;
const RENEW_RETRY_MS = 60_000;

let token: string | undefined;
let lastUse = Date.now();
let renewDueAt = Infinity;
let onEnd: ((why: string) => void) | undefined;
let timer: ReturnType<typeof setInterval> | undefined;

export class ApiError extends Error {
  readonly status: number;
  readonly errors: string[];
  constructor(status: number, errors: string[]) {
    super(status === 403 ? `Permission denied (403): ${errors.join('; ') || 'the token\'s policies do not allow this'}` : `Error ${status}: ${errors.join('; ')}`);
    this.status = status;
    this.errors = errors;
  }
}

export function currentToken(): string | undefined {
  return token;
}

/** The operator did something: idleness counts from here. */
export function touch(): void {
  lastUse = Date.now();
}

/** Sends a request to /v1 with the token in X-Vault-Token; the answer's JSON, or undefined for 204. */
export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (token) headers['X-Vault-Token'] = token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`/v1/${path}`, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer',
  });
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = text;
  }
  if (!res.ok) throw new ApiError(res.status, Array.isArray(json?.errors) ? json.errors.map(String) : [res.statusText]);
  return json as T;
}

/** A LIST, as GET with list=true; no keys (404) is an empty list. */
export async function list(path: string): Promise<{ keys: string[]; key_info?: Record<string, any> }> {
  try {
    const r = await api('GET', `${path}${path.includes('?') ? '&' : '?'}list=true`);
    return { keys: r?.data?.keys ?? [], key_info: r?.data?.key_info };
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return { keys: [] };
    throw err;
  }
}

function scheduleRenewal(ttlSeconds: number, renewable: boolean): void {
  renewDueAt = renewable && ttlSeconds > 0 ? Date.now() + (ttlSeconds * 1000) / 2 : Infinity;
}

async function tick(): Promise<void> {
  if (!token) return;
  if (Date.now() - lastUse >= IDLE_MS) return end('Signed out after 15 minutes without use; the token was dropped from this page.');
  if (Date.now() < renewDueAt) return;
  renewDueAt = Infinity;
  try {
    const r = await api('POST', 'auth/token/renew-self', {});
    scheduleRenewal(r?.auth?.lease_duration ?? 0, r?.auth?.renewable ?? false);
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) return end('The token expired or was revoked.');
    // Unreachable or refused for another reason: try again in a minute, well before the TTL's second half ends.
    renewDueAt = Date.now() + RENEW_RETRY_MS;
  }
}

function end(why: string): void {
  token = undefined;
  sessionStorage.removeItem(REMEMBER_KEY);
  if (timer) clearInterval(timer);
  timer = undefined;
  onEnd?.(why);
}

export interface TokenInfo { display_name: string; policies: string[]; ttl: number; renewable: boolean; accessor: string }

/** Checks the token with lookup-self and keeps it; throws the API's error for a bad one. */
export async function signIn(candidate: string, remember: boolean, ended: (why: string) => void): Promise<TokenInfo> {
  token = candidate;
  try {
    const r = await api('GET', 'auth/token/lookup-self');
    const info: TokenInfo = { display_name: r.data.display_name, policies: r.data.policies ?? [], ttl: r.data.ttl ?? 0, renewable: !!r.data.renewable, accessor: r.data.accessor };
    if (remember) sessionStorage.setItem(REMEMBER_KEY, candidate);
    else sessionStorage.removeItem(REMEMBER_KEY);
    onEnd = ended;
    touch();
    scheduleRenewal(info.ttl, info.renewable);
    timer ??= setInterval(() => void tick(), CHECK_MS);
    return info;
  } catch (err) {
    token = undefined;
    throw err;
  }
}

/** The token this tab remembered, if the operator asked for that. */
export function rememberedToken(): string | undefined {
  return sessionStorage.getItem(REMEMBER_KEY) ?? undefined;
}

/** Drops the token from the page; revokes it first only when asked. */
export async function signOut(revoke: boolean): Promise<void> {
  if (revoke && token) await api('POST', 'auth/token/revoke-self', {}).catch(() => undefined);
  end('Signed out.');
}

for (const type of ['keydown', 'pointerdown']) document.addEventListener(type, touch, { capture: true, passive: true });
