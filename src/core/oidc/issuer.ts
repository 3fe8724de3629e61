import type { JWK } from 'jose';
import { z } from 'zod';
import { jose } from '../../lib/first-use.ts';
import type { Clock } from '../clock.ts';
import { BadRequestError, ConflictError, NotFoundError } from '../errors.ts';
import type { SystemView } from '../framework.ts';
import { KeyedLock } from '../keyed-lock.ts';
import type { MountEntry } from '../mounts.ts';
import type { StorageView } from '../storage/view.ts';
import { DEFAULT_KEY_NAME, KEY_DEFAULTS, KeyStore, current, newNamedKey, publicKeys, rotated, type NamedKey, type SigningAlgorithm } from './keys.ts';

export const PLUGIN_ISSUER_PATH = '/v1/identity/oidc/plugins';
export const MAX_AUDIENCE_LENGTH = 600;
export const DEFAULT_TOKEN_TTL = 3600;
/** The private claim naming the mount a plugin identity token speaks for. */
export const MOUNT_CLAIM = 'strongroom';

const ISSUER_RULE = 'invalid issuer, which must include only a scheme, host, and optional port (e.g. https://example.com:8200)';

/** Scheme, host and optional port only (Vault's rule); returns the canonical form without a trailing slash. */
export function validateIssuer(raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new BadRequestError(ISSUER_RULE);
  }
  const pathless = url.pathname === '/' && !/[?#]/.test(raw);
  if (!['http:', 'https:'].includes(url.protocol) || url.username || url.password || !pathless) throw new BadRequestError(ISSUER_RULE);
  return `${url.protocol}//${url.host}`;
}

export function validateAudience(audience: string): void {
  if (audience === '') throw new BadRequestError('invalid value for field "identity_token_audience": must not be empty to generate a plugin identity token');
  if (audience.length >= MAX_AUDIENCE_LENGTH) throw new BadRequestError(`invalid value for field "identity_token_audience": must be shorter than ${MAX_AUDIENCE_LENGTH} characters`);
}

export interface KeySettings {
  algorithm: SigningAlgorithm;
  rotationPeriod: number;
  verificationTtl: number;
}

/** Vault's bounds: rotation at most once a minute; a verifier need not keep more than ten generations. */
export function validateKeyTimings(s: Pick<KeySettings, 'rotationPeriod' | 'verificationTtl'>): void {
  if (s.rotationPeriod < 60) throw new BadRequestError('invalid value for field "rotation_period": must be at least one minute');
  if (s.verificationTtl <= 0) throw new BadRequestError('invalid value for field "verification_ttl": must be positive');
  if (s.verificationTtl > 10 * s.rotationPeriod) throw new BadRequestError('invalid value for field "verification_ttl": cannot be longer than 10x rotation_period');
}

const configSchema = z.object({ issuer: z.string() });

export interface IssuerOptions {
  /** The identity mount's own view; the barrier encrypts everything in it. */
  storage: StorageView;
  clock: Clock;
  /** Issuer base when `identity/oidc/config` sets none (STRONGROOM_API_ADDR or the listen address). */
  defaultIssuer: string;
  /** Scheduled rotations are the cluster leader's, under its fence (a single node always leads). */
  system: Pick<SystemView, 'leading' | 'fence'>;
}

/** How often one write of a key is tried again when other nodes keep changing it. */
const KEY_RACES = 8;

/**
 * The plugin workload identity issuer: signs tokens that say "this request comes from mount X", which a cloud
 * directory trusts through a federated credential after fetching the discovery document and keys below.
 */
export class PluginIdentityIssuer {
  readonly #view: StorageView;
  readonly #keys: KeyStore;
  readonly #clock: Clock;
  readonly #defaultIssuer: string;
  readonly #system: IssuerOptions['system'];
  readonly #locks = new KeyedLock();
  /**
   * The published documents' inputs as last read, and the instant (epoch ms) until which they hold: the next
   * rotation or retirement. Anyone may fetch the documents without a token, so they are built once per key change,
   * not per request; any write here (and, through `invalidate`, on another node) drops them.
   */
  #published: { issuer: string; keys: JWK[]; until: number } | undefined;
  /** Bumped by every drop: a build that began before one is not kept. */
  #generation = 0;

  constructor(opts: IssuerOptions) {
    this.#view = opts.storage;
    this.#keys = new KeyStore(opts.storage);
    this.#clock = opts.clock;
    this.#defaultIssuer = opts.defaultIssuer;
    this.#system = opts.system;
  }

  // ---- issuer configuration ----------------------------------------------------------------------

  /** The configured base issuer, "" when the server default applies. */
  async configuredIssuer(): Promise<string> {
    return (await this.#view.getJson('config', (raw) => configSchema.parse(raw)))?.issuer ?? '';
  }

  /** An empty value returns to the server default. */
  async setIssuer(raw: string): Promise<void> {
    try {
      await this.#view.putJson('config', { issuer: raw === '' ? '' : validateIssuer(raw) });
    } finally {
      this.invalidate();
    }
  }

  async pluginIssuer(): Promise<string> {
    return `${(await this.configuredIssuer()) || this.#defaultIssuer}${PLUGIN_ISSUER_PATH}`;
  }

  /** Drops the published documents: the config or a key changed (here, or on another node: the backend's `cached`). */
  invalidate(): void {
    this.#published = undefined;
    this.#generation++;
  }

  async discovery(): Promise<Record<string, unknown>> {
    const { issuer } = await this.#documents();
    return {
      issuer,
      jwks_uri: `${issuer}/.well-known/keys`,
      response_types_supported: ['id_token'],
      subject_types_supported: ['public'],
      id_token_signing_alg_values_supported: ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'ES512', 'EdDSA'],
    };
  }

  /** Every key's publishable halves and how long a verifier may cache them (until the next change). */
  async jwks(): Promise<{ keys: JWK[]; maxAgeSeconds: number | undefined }> {
    const { keys, until } = await this.#documents();
    return { keys, maxAgeSeconds: keys.length ? Math.max(0, Math.floor((until - this.#clock.now()) / 1000)) : undefined };
  }

  /** The cached inputs while they hold, else read again (and kept, unless something changed meanwhile). */
  async #documents(): Promise<{ issuer: string; keys: JWK[]; until: number }> {
    const cached = this.#published;
    if (cached && this.#clock.now() < cached.until) return cached;
    const generation = this.#generation;
    const now = this.#clock.now();
    const keys: JWK[] = [];
    let until = Infinity;
    for (const name of await this.#keys.names()) {
      const key = await this.#current(name);
      if (!key) continue;
      keys.push(...publicKeys(key, now));
      until = Math.min(until, key.next_rotation, ...key.retired.map((r) => r.expire_at));
    }
    const built = { issuer: await this.pluginIssuer(), keys, until };
    // No key yet: the first token creates one, on any node, with no write this node would hear of first.
    if (generation === this.#generation && keys.length) this.#published = built;
    return built;
  }

  // ---- named keys --------------------------------------------------------------------------------

  async readKey(name: string): Promise<NamedKey | undefined> {
    return this.#current(name);
  }

  listKeys(): Promise<string[]> {
    return this.#keys.names();
  }

  /** Creates the key, or applies the given changes; a new algorithm takes effect through an immediate rotation. */
  async writeKey(name: string, changes: Partial<KeySettings>): Promise<void> {
    await this.#edit(name, async (existing, now) => {
      if (!existing) {
        const settings = { algorithm: changes.algorithm ?? KEY_DEFAULTS.algorithm, rotationPeriod: changes.rotationPeriod ?? KEY_DEFAULTS.rotationPeriod, verificationTtl: changes.verificationTtl ?? KEY_DEFAULTS.verificationTtl };
        validateKeyTimings(settings);
        return newNamedKey(name, settings, now);
      }
      const rotationPeriod = changes.rotationPeriod ?? existing.rotation_period;
      const verificationTtl = changes.verificationTtl ?? existing.verification_ttl;
      validateKeyTimings({ rotationPeriod, verificationTtl });
      let key: NamedKey = { ...existing, rotation_period: rotationPeriod, verification_ttl: verificationTtl };
      if (rotationPeriod !== existing.rotation_period) key.next_rotation = now + rotationPeriod * 1000;
      if (changes.algorithm && changes.algorithm !== existing.algorithm) key = await rotated({ ...key, algorithm: changes.algorithm }, now);
      return key;
    });
  }

  /** Rotates now; `verificationTtl` overrides how long the outgoing key stays published. */
  async rotateKey(name: string, verificationTtl?: number): Promise<void> {
    await this.#edit(name, async (key, now) => {
      if (!key) throw new NotFoundError(`no OIDC key named "${name}"`);
      return rotated(key, now, verificationTtl);
    });
  }

  /** A change of a key by hand (any node), applied to the key as stored, by compare-and-set. */
  async #edit(name: string, change: (existing: NamedKey | undefined, now: number) => Promise<NamedKey>): Promise<void> {
    await this.#locks.run(name, async () => {
      for (let race = 0; race < KEY_RACES; race++) {
        const stored = await this.#keys.snapshot(name);
        if (await this.#keys.replace(await change(stored?.key, this.#clock.now()), stored?.raw)) return this.invalidate();
      }
      throw new ConflictError(`the OIDC key "${name}" kept changing while it was being written; try again`);
    });
  }

  /** Leader work: every key whose rotation is due is rotated (and its expired public keys dropped), unused or not. */
  async rotateDue(): Promise<void> {
    for (const name of await this.#keys.names()) await this.#current(name);
  }

  async deleteKey(name: string): Promise<void> {
    await this.#locks.run(name, () => this.#keys.delete(name));
    this.invalidate();
  }

  // ---- plugin identity tokens --------------------------------------------------------------------

  /**
   * Signs a token for a mount with its `identity_token_key` (default "default", created on first use). The
   * TTL is capped at the key's verification TTL so the signing key is still published when the token is
   * checked; the caller learns the TTL actually granted.
   */
  async generate(entry: MountEntry, audience: string, ttlSeconds: number): Promise<{ token: string; ttl: number }> {
    validateAudience(audience);
    const keyName = entry.config.identity_token_key || DEFAULT_KEY_NAME;
    const key = await this.#current(keyName, keyName === DEFAULT_KEY_NAME);
    if (!key) throw new BadRequestError(`invalid value for field "identity_token_key": no OIDC key named "${keyName}" exists (create it at identity/oidc/key/${keyName})`);
    const ttl = Math.min(ttlSeconds > 0 ? ttlSeconds : DEFAULT_TOKEN_TTL, key.verification_ttl);
    const now = Math.floor(this.#clock.now() / 1000);
    const { SignJWT, importJWK } = jose();
    const token = await new SignJWT({ [MOUNT_CLAIM]: { class: entry.class, accessor: entry.accessor, path: entry.path } })
      .setProtectedHeader({ alg: key.signing.algorithm, kid: key.signing.kid, typ: 'JWT' })
      .setIssuer(await this.pluginIssuer())
      .setSubject(`plugin-identity:root:${entry.class}:${entry.accessor}`)
      .setAudience(audience)
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + ttl)
      .sign(await importJWK(key.signing.private_jwk, key.signing.algorithm));
    return { token, ttl };
  }

  /**
   * The key as of now, rotating and pruning first. Only the leader persists a rotation (fenced, over the key as read):
   * a rotation makes new key pairs, and two nodes making them at once would publish pairs that never sign. Another
   * node serves the stored key until the leader's rotation reaches it (its JWKS is then not cached: max-age 0). The
   * first token of a store without a default key creates it, on any node, once (compare-and-set).
   */
  async #current(name: string, createMissing = false): Promise<NamedKey | undefined> {
    return this.#locks.run(name, async () => {
      for (let race = 0; race < KEY_RACES; race++) {
        const now = this.#clock.now();
        const stored = await this.#keys.snapshot(name);
        if (!stored) {
          if (!createMissing) return undefined;
          const created = await newNamedKey(name, KEY_DEFAULTS, now);
          if (!(await this.#keys.replace(created, undefined))) continue;
          this.invalidate();
          return created;
        }
        if (!this.#system.leading()) return { ...stored.key, retired: stored.key.retired.filter((r) => r.expire_at > now) };
        const { key, changed } = await current(stored.key, now);
        if (!changed) return key;
        if (await this.#keys.replace(key, stored.raw, [this.#system.fence()])) {
          this.invalidate();
          return key;
        }
        // Changed by hand on another node meanwhile, or this node no longer leads: read it again.
      }
      throw new ConflictError(`the OIDC key "${name}" kept changing while it was read; try again`);
    });
  }
}
