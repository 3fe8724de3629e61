/**
 * Verifies login JWTs against the tenant's OpenID discovery document and JWKS: RS256 only, `iss`
 * equal to the discovered issuer, `tid` equal to the configured tenant, `aud` equal to the configured
 * resource, exp/nbf with a small skew.
 *
 * The tenant is checked on its own as well as through the issuer: Entra signs every tenant's tokens with
 * the same keys, so the signature alone says nothing about the tenant, and `tid` is the claim that names
 * it. A tenant configured by domain name is bound by the tenant id its discovery document's issuer names.
 *
 * Discovery and keys are cached. A token with an unknown `kid` (the directory rotated its keys) makes
 * the verifier fetch the document and keys again, but at most once per `minRefreshIntervalMs` and never
 * concurrently: a flood of tokens with random kids costs the directory one request per interval, and a
 * refresh that fails is not retried before the interval either. The price is that a genuinely new key
 * can be refused for up to one interval after a refresh; Entra ID publishes new keys well before
 * signing with them, so that window does not occur in practice.
 */
import type { createLocalJWKSet, decodeProtectedHeader, JSONWebKeySet, JWTPayload } from 'jose';
import { z } from 'zod';
import type { Clock } from '../../core/clock.ts';
import { jose } from '../../lib/first-use.ts';
import { BadRequestError, PermissionDeniedError, UpstreamError } from '../../core/errors.ts';

/** Allowed difference between our clock and the directory's for exp and nbf, in seconds. */
export const CLOCK_SKEW_SECONDS = 60;
/** Entra tokens, even with 200 groups, stay well below this; larger input is refused before any parsing. */
export const MAX_JWT_BYTES = 16 * 1024;
const MAX_DOCUMENT_BYTES = 512 * 1024;
const FETCH_TIMEOUT_MS = 10_000;

export interface JwtVerifierOptions {
  /** `<authority>/<tenant>/.well-known/openid-configuration` (the v1 document: managed-identity tokens carry the v1 issuer). */
  discoveryUrl: string;
  /** The configured tenant: a tenant id (GUID) or a verified domain name. */
  tenantId: string;
  audience: string;
  clock: Clock;
  fetch?: typeof fetch;
  minRefreshIntervalMs?: number;
  /** How long a fetched discovery document and key set are used before a routine refresh. */
  cacheTtlMs?: number;
}

const discoverySchema = z.object({ issuer: z.string().min(1), jwks_uri: z.url() });
const jwksSchema = z.object({ keys: z.array(z.looseObject({ kty: z.string(), kid: z.string().optional() })) });

interface KeyState {
  issuer: string;
  /** Lower-cased tenant id the `tid` claim must name. */
  tenant: string;
  kids: Set<string>;
  keys: ReturnType<typeof createLocalJWKSet>;
  fetchedAt: number;
}

const deny = (what: string): PermissionDeniedError => new PermissionDeniedError(`permission denied: ${what}`);

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The tenant id an Entra issuer names (`https://sts.windows.net/<tid>/`, `https://login.microsoftonline.com/<tid>/v2.0`). */
function issuerTenant(issuer: string): string | undefined {
  const path = URL.parse(issuer)?.pathname ?? '';
  return path.split('/').find((segment) => GUID.test(segment))?.toLowerCase();
}

export class JwtVerifier {
  readonly #opts: Required<Omit<JwtVerifierOptions, 'fetch'>> & { fetch: typeof fetch };
  #state: KeyState | undefined;
  #inflight: Promise<void> | undefined;
  #lastAttempt = Number.NEGATIVE_INFINITY;
  /** Directory requests made so far (discovery + JWKS); for tests and the benchmark. */
  fetches = 0;

  constructor(opts: JwtVerifierOptions) {
    this.#opts = { minRefreshIntervalMs: 60_000, cacheTtlMs: 24 * 3600_000, fetch: globalThis.fetch, ...opts };
  }

  /** Returns the verified payload; 400 for input that is not a JWT at all, 403 for every failed check. */
  async verify(jwt: string): Promise<JWTPayload & Record<string, unknown>> {
    if (Buffer.byteLength(jwt, 'utf8') > MAX_JWT_BYTES) throw new BadRequestError(`invalid value for field "jwt": longer than ${MAX_JWT_BYTES} bytes`);
    if (!/^[\w-]+\.[\w-]+\.[\w-]*$/.test(jwt)) throw new BadRequestError('invalid value for field "jwt": not a compact JWT (header.payload.signature, base64url)');
    let header: ReturnType<typeof decodeProtectedHeader>;
    try {
      header = jose().decodeProtectedHeader(jwt);
    } catch {
      throw new BadRequestError('invalid value for field "jwt": the header is not base64url-encoded JSON');
    }
    if (header.alg !== 'RS256') throw deny('JWT algorithm is not RS256');
    if (typeof header.kid !== 'string' || header.kid === '') throw deny('JWT header has no key id');
    if (header.crit !== undefined) throw deny('JWT names critical header parameters this server does not process');

    await this.#ensureLoaded();
    if (!this.#state!.kids.has(header.kid)) {
      // A directory outage here means the key stays unknown: the token is refused, not the service.
      await this.#refresh().catch(() => undefined);
      if (!this.#state?.kids.has(header.kid)) throw deny("JWT key id is not one of the tenant's signing keys");
    }
    const state = this.#state!;
    let payload: JWTPayload;
    try {
      ({ payload } = await jose().jwtVerify(jwt, state.keys, {
        algorithms: ['RS256'],
        issuer: state.issuer,
        audience: this.#opts.audience,
        clockTolerance: CLOCK_SKEW_SECONDS,
        currentDate: new Date(this.#opts.clock.now()),
        requiredClaims: ['exp'],
      }));
    } catch (err) {
      throw denial(err);
    }
    // Tenant ids are GUIDs, which compare case-insensitively.
    if (payload.tid === undefined) throw deny('JWT has no tenant (tid) claim');
    if (typeof payload.tid !== 'string' || payload.tid.toLowerCase() !== state.tenant) throw deny('JWT tenant (tid) is not the configured tenant');
    return payload as JWTPayload & Record<string, unknown>;
  }

  async #ensureLoaded(): Promise<void> {
    const state = this.#state;
    if (state && this.#opts.clock.now() - state.fetchedAt < this.#opts.cacheTtlMs) return;
    if (state) {
      // Stale but usable: refresh when allowed, keep serving the old keys if the directory is down.
      await this.#refresh().catch(() => undefined);
      return;
    }
    await this.#refresh(true);
  }

  /** One fetch at a time and at most one per interval; `required` rethrows when nothing is cached. */
  async #refresh(required = false): Promise<void> {
    if (this.#inflight) return this.#inflight;
    const now = this.#opts.clock.now();
    if (now - this.#lastAttempt < this.#opts.minRefreshIntervalMs) {
      if (required && !this.#state) throw new UpstreamError('the directory\'s discovery document is unavailable; retry shortly');
      return;
    }
    this.#lastAttempt = now;
    this.#inflight = this.#load().finally(() => {
      this.#inflight = undefined;
    });
    return this.#inflight;
  }

  async #load(): Promise<void> {
    const discovery = discoverySchema.safeParse(await this.#getJson(this.#opts.discoveryUrl, 'discovery document'));
    if (!discovery.success) throw new UpstreamError('the directory\'s discovery document has no valid issuer and jwks_uri');
    const jwks = jwksSchema.safeParse(await this.#getJson(discovery.data.jwks_uri, 'key set'));
    if (!jwks.success) throw new UpstreamError('the directory\'s key set (JWKS) is malformed');
    // jose refuses RS256 keys under 2048 bits with a TypeError at verification; leaving them out here makes a
    // token naming one an unknown key (403) rather than an internal error.
    const keys = jwks.data.keys.filter((k) => !(k.kty === 'RSA' && typeof k.n === 'string' && rsaModulusBits(k.n) < MIN_RSA_BITS));
    const configured = this.#opts.tenantId;
    const tenant = GUID.test(configured) ? configured.toLowerCase() : issuerTenant(discovery.data.issuer);
    if (!tenant) throw new UpstreamError("the directory's discovery document names no tenant id in its issuer, so token tenants cannot be checked");
    this.#state = {
      issuer: discovery.data.issuer,
      tenant,
      kids: new Set(keys.map((k) => k.kid).filter((k): k is string => !!k)),
      keys: jose().createLocalJWKSet({ keys } as JSONWebKeySet),
      fetchedAt: this.#opts.clock.now(),
    };
  }

  async #getJson(url: string, what: string): Promise<unknown> {
    this.fetches++;
    let res: Response;
    try {
      // No redirects: the server must not be steered to fetch keys from elsewhere.
      res = await this.#opts.fetch(url, { redirect: 'error', signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), headers: { accept: 'application/json' } });
    } catch (err) {
      throw new UpstreamError(`cannot fetch the directory's ${what}: ${(err as Error).message}`);
    }
    const text = await res.text();
    if (!res.ok) throw new UpstreamError(`cannot fetch the directory's ${what}: HTTP ${res.status}`);
    if (text.length > MAX_DOCUMENT_BYTES) throw new UpstreamError(`the directory's ${what} is larger than ${MAX_DOCUMENT_BYTES} bytes`);
    try {
      return JSON.parse(text);
    } catch {
      throw new UpstreamError(`the directory's ${what} is not JSON`);
    }
  }
}

const MIN_RSA_BITS = 2048;

/** Bit length of a JWK's base64url modulus (leading zero bytes do not count). */
function rsaModulusBits(n: string): number {
  const bytes = Buffer.from(n, 'base64url');
  let i = 0;
  while (i < bytes.length && bytes[i] === 0) i++;
  return i === bytes.length ? 0 : (bytes.length - i - 1) * 8 + (32 - Math.clz32(bytes[i]));
}

/** Maps jose's errors to messages that name the failed check and never a claim value. */
function denial(err: unknown): Error {
  const joseErrors = jose().errors;
  if (err instanceof joseErrors.JWTExpired) return deny('JWT has expired');
  if (err instanceof joseErrors.JWTClaimValidationFailed) {
    switch (err.claim) {
      case 'nbf': return deny('JWT is not yet valid (nbf)');
      case 'iss': return deny("JWT issuer is not the configured tenant's");
      case 'aud': return deny('JWT audience does not match the configured resource');
      case 'exp': return deny('JWT has no expiry');
      case 'iat': return deny('JWT issue time (iat) is not a number');
      default: return deny('JWT claim validation failed');
    }
  }
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return deny('JWT signature verification failed');
  if (err instanceof joseErrors.JOSEAlgNotAllowed) return deny('JWT algorithm is not RS256');
  if (err instanceof joseErrors.JWKSNoMatchingKey || err instanceof joseErrors.JWKSMultipleMatchingKeys) return deny("JWT key id is not one of the tenant's signing keys");
  if (err instanceof joseErrors.JOSEError) return deny('JWT is malformed');
  return err as Error;
}
