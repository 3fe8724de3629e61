import { BadRequestError } from './errors.ts';
import { DurationError, describeSeconds, parseDurationSecond } from './durations.ts';
import type { Clock } from './clock.ts';
import { GuardError } from './storage/view.ts';
import { issueToken, type TokenIssuer } from './token-issue.ts';
import type { TokenEntry } from './tokens.ts';

/**
 * Response wrapping (docs/wrapping.md): an answer is kept, encrypted by the barrier like all storage, beside a new
 * token that holds only the `response-wrapping` policy, cannot be renewed and lives `ttl` seconds; the client gets
 * Vault's `wrap_info` instead. Unwrapping takes the answer away by compare-and-set, so it is read exactly once, and
 * revokes the token; a token that expires or is revoked takes its answer with it (TokenStore.remove).
 */
export const WRAPPING_POLICY = 'response-wrapping';
export const WRAP_TTL_HEADER = 'X-Vault-Wrap-TTL';
/** The token's creation path: every wrapping token is one of sys/wrapping/wrap's, as in Vault. */
const TOKEN_PATH = 'sys/wrapping/wrap';
const INVALID = 'wrapping token is not valid or does not exist';

export interface WrapInfo {
  token: string;
  accessor: string;
  ttl: number;
  creation_time: string;
  creation_path: string;
  wrapped_accessor?: string;
}

/** The envelope a wrapped request answers with: nothing but how to unwrap (Vault leaves even the request id empty). */
export function wrappedEnvelope(wrapInfo: WrapInfo): Record<string, unknown> {
  return { request_id: '', lease_id: '', renewable: false, lease_duration: 0, data: null, wrap_info: wrapInfo, warnings: null, auth: null, mount_type: '' };
}

/** What a wrapping token holds: the answer as the client would have read it, and where it came from. */
interface Wrapped {
  body: string;
  creationPath: string;
  creationTime: number;
  ttl: number;
}

export interface WrappingCore extends TokenIssuer {
  clock: Clock;
  revokeTokenTree(salted: string): Promise<void>;
}

/**
 * The wrap TTL a request asks for, in seconds: undefined when it asks for none (no header, or zero, as in Vault).
 * Past the bounds (1 s up to the server's maximum lease TTL) a 400 names the header.
 */
export function requestedWrapTtl(raw: string | undefined, maxTtl: number): number | undefined {
  if (raw === undefined || raw.trim() === '') return undefined;
  let ttl: number;
  try {
    ttl = parseDurationSecond(raw);
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    throw new BadRequestError(`invalid value for header "${WRAP_TTL_HEADER}": ${err.message}`);
  }
  if (ttl < 0) throw new BadRequestError(`invalid value for header "${WRAP_TTL_HEADER}": the wrap TTL cannot be negative`);
  if (ttl > maxTtl) throw new BadRequestError(`invalid value for header "${WRAP_TTL_HEADER}": longer than the maximum of ${describeSeconds(maxTtl)}`);
  return ttl === 0 ? undefined : ttl;
}

export class ResponseWrapper {
  readonly #core: WrappingCore;

  constructor(core: WrappingCore) {
    this.#core = core;
  }

  /** Keeps `body` behind a new wrapping token (token, answer and its expiry lease in one commit). */
  async wrap(body: string, opts: { ttl: number; creationPath: string; wrappedAccessor?: string }): Promise<WrapInfo> {
    return this.#wrap({ body, creationPath: opts.creationPath, creationTime: this.#core.clock.now(), ttl: opts.ttl }, opts.wrappedAccessor);
  }

  async #wrap(wrapped: Wrapped, wrappedAccessor: string | undefined, replacing?: { salted: string; raw: Buffer }): Promise<WrapInfo> {
    const store = this.#core.tokens.wrapped;
    const issued = await issueToken(this.#core, {
      policies: [WRAPPING_POLICY], path: TOKEN_PATH, displayName: '', ttl: wrapped.ttl, explicitMaxTtl: wrapped.ttl, parent: '', renewable: false,
      alongside: (entry) => [{
        ops: store.qualify([
          { type: 'put', key: entry.salted, value: Buffer.from(JSON.stringify(wrapped)) },
          ...(replacing ? [{ type: 'delete' as const, key: replacing.salted }] : []),
        ]),
        // A rewrap takes the old answer away in the same commit, so two rewraps (or a rewrap and an unwrap) of one
        // token never both succeed.
        conditions: replacing ? [{ key: `${store.prefix}${replacing.salted}`, expected: replacing.raw }] : [],
        committed: () => {},
      }],
    });
    return {
      token: issued.token, accessor: issued.entry.accessor, ttl: wrapped.ttl, creation_time: new Date(wrapped.creationTime).toISOString(),
      creation_path: wrapped.creationPath, ...(wrappedAccessor ? { wrapped_accessor: wrappedAccessor } : {}),
    };
  }

  /** The wrapping token's entry and answer as stored, or a 400: never a hint whether the token ever existed. */
  async #held(token: string): Promise<{ entry: TokenEntry; raw: Buffer; wrapped: Wrapped }> {
    const entry = await this.#core.tokens.lookup(token);
    const raw = entry && entry.policies.length === 1 && entry.policies[0] === WRAPPING_POLICY ? await this.#core.tokens.wrapped.get(entry.salted) : undefined;
    if (!entry || !raw) throw new BadRequestError(INVALID);
    return { entry, raw, wrapped: JSON.parse(raw.toString('utf8')) as Wrapped };
  }

  /** The answer, once: taken away by compare-and-set, then the token is revoked. */
  async unwrap(token: string): Promise<string> {
    const { entry, raw, wrapped } = await this.#held(token);
    const store = this.#core.tokens.wrapped;
    if (!(await store.transaction([{ type: 'delete', key: entry.salted }], [{ key: entry.salted, expected: raw }]))) throw new BadRequestError(INVALID);
    await this.#core.revokeTokenTree(entry.salted);
    return wrapped.body;
  }

  async lookup(token: string): Promise<{ creation_path: string; creation_time: string; creation_ttl: number }> {
    const { wrapped } = await this.#held(token);
    return { creation_path: wrapped.creationPath, creation_time: new Date(wrapped.creationTime).toISOString(), creation_ttl: wrapped.ttl };
  }

  /** The same answer behind a new token with the same TTL and creation path; the old token stops working. */
  async rewrap(token: string): Promise<WrapInfo> {
    const { entry, raw, wrapped } = await this.#held(token);
    let info: WrapInfo;
    try {
      info = await this.#wrap({ ...wrapped, creationTime: this.#core.clock.now() }, undefined, { salted: entry.salted, raw });
    } catch (err) {
      if (err instanceof GuardError) throw new BadRequestError(INVALID);
      throw err;
    }
    await this.#core.revokeTokenTree(entry.salted);
    return info;
  }
}
