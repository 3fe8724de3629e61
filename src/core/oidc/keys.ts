import type { JWK } from 'jose';
import { z } from 'zod';
import { randomUUID } from 'node:crypto';
import { jose } from '../../lib/first-use.ts';
import type { PreparedWrite, StorageView } from '../storage/view.ts';

/**
 * Named OIDC signing keys, as in Vault's identity store: each key has a current signing key, a pre-generated
 * next key (published early so verifiers can cache it before it signs anything) and retired public keys that
 * stay published until every token they signed has expired. Private halves live only in the barrier.
 */
export const SIGNING_ALGORITHMS = ['RS256', 'RS384', 'RS512', 'ES256', 'ES384', 'ES512', 'EdDSA'] as const;
export type SigningAlgorithm = (typeof SIGNING_ALGORITHMS)[number];

export const KEY_DEFAULTS = { algorithm: 'RS256' as SigningAlgorithm, rotationPeriod: 24 * 3600, verificationTtl: 24 * 3600 };
export const DEFAULT_KEY_NAME = 'default';

const jwkSchema = z.record(z.string(), z.unknown()).transform((v) => v as JWK);
const keyPairSchema = z.object({ kid: z.string(), algorithm: z.enum(SIGNING_ALGORITHMS), private_jwk: jwkSchema, public_jwk: jwkSchema });
const retiredSchema = z.object({ kid: z.string(), algorithm: z.enum(SIGNING_ALGORITHMS), public_jwk: jwkSchema, expire_at: z.number() });
const namedKeySchema = z.object({
  name: z.string(),
  algorithm: z.enum(SIGNING_ALGORITHMS),
  /** Seconds. */
  rotation_period: z.number().int().positive(),
  verification_ttl: z.number().int().positive(),
  /** Epoch ms at which `next` takes over from `signing`. */
  next_rotation: z.number(),
  signing: keyPairSchema,
  next: keyPairSchema,
  retired: z.array(retiredSchema),
});
export type KeyPair = z.infer<typeof keyPairSchema>;
export type NamedKey = z.infer<typeof namedKeySchema>;

/** JWK members that carry public material, per key type; anything else (d, p, q, dp, dq, qi, k) is private. */
const PUBLIC_MEMBERS: Record<string, string[]> = { RSA: ['kty', 'n', 'e'], EC: ['kty', 'crv', 'x', 'y'], OKP: ['kty', 'crv', 'x'] };

/** A published JWK built from an allow-list, so no private member can slip into the JWKS. */
export function publishedJwk(kid: string, algorithm: SigningAlgorithm, jwk: JWK): JWK {
  const members = PUBLIC_MEMBERS[jwk.kty ?? ''] ?? [];
  const out: Record<string, unknown> = {};
  for (const m of members) if (jwk[m as keyof JWK] !== undefined) out[m] = jwk[m as keyof JWK];
  return { ...out, kid, alg: algorithm, use: 'sig' } as JWK;
}

export async function newKeyPair(algorithm: SigningAlgorithm): Promise<KeyPair> {
  const { exportJWK, generateKeyPair } = jose();
  const { privateKey, publicKey } = await generateKeyPair(algorithm, { extractable: true });
  const kid = randomUUID();
  return { kid, algorithm, private_jwk: await exportJWK(privateKey), public_jwk: await exportJWK(publicKey) };
}

export async function newNamedKey(name: string, settings: { algorithm: SigningAlgorithm; rotationPeriod: number; verificationTtl: number }, now: number): Promise<NamedKey> {
  return {
    name, algorithm: settings.algorithm, rotation_period: settings.rotationPeriod, verification_ttl: settings.verificationTtl,
    next_rotation: now + settings.rotationPeriod * 1000,
    signing: await newKeyPair(settings.algorithm), next: await newKeyPair(settings.algorithm), retired: [],
  };
}

/**
 * Moves `next` into service and retires the old signing key. The retired public key must outlive any token
 * it signed: tokens are capped at the verification TTL, and the key signed its last token just now.
 */
export async function rotated(key: NamedKey, now: number, verificationTtl = key.verification_ttl): Promise<NamedKey> {
  const { signing } = key;
  // A changed algorithm also invalidates the pre-generated next key, which nothing has signed with.
  const incoming = key.next.algorithm === key.algorithm ? key.next : await newKeyPair(key.algorithm);
  return {
    ...key,
    next_rotation: now + key.rotation_period * 1000,
    signing: incoming,
    next: await newKeyPair(key.algorithm),
    retired: [...key.retired, { kid: signing.kid, algorithm: signing.algorithm, public_jwk: signing.public_jwk, expire_at: now + verificationTtl * 1000 }],
  };
}

/** Rotation is evaluated against the injected clock whenever a key is used or published. */
export async function current(key: NamedKey, now: number): Promise<{ key: NamedKey; changed: boolean }> {
  let next = key;
  if (now >= key.next_rotation) next = await rotated(key, now);
  const retired = next.retired.filter((r) => r.expire_at > now);
  const changed = next !== key || retired.length !== key.retired.length;
  return { key: changed ? { ...next, retired } : key, changed };
}

/** Public keys a verifier may meet: current, next, and retired ones still within their verification window. */
export function publicKeys(key: NamedKey, now: number): JWK[] {
  return [
    publishedJwk(key.signing.kid, key.signing.algorithm, key.signing.public_jwk),
    publishedJwk(key.next.kid, key.next.algorithm, key.next.public_jwk),
    ...key.retired.filter((r) => r.expire_at > now).map((r) => publishedJwk(r.kid, r.algorithm, r.public_jwk)),
  ];
}

/**
 * Typed storage for named keys (`key/<name>` in the identity mount's view). Writes replace exactly the bytes read
 * (compare-and-set): nodes of a cluster create, change and rotate keys too, and a key pair one of them published must
 * not be overwritten by another's.
 */
export class KeyStore {
  readonly #view: StorageView;

  constructor(view: StorageView) {
    this.#view = view;
  }

  /** The key with the bytes it was read from, for `replace`. */
  async snapshot(name: string): Promise<{ key: NamedKey; raw: Buffer } | undefined> {
    const raw = await this.#view.get(`key/${name}`);
    return raw && { key: namedKeySchema.parse(JSON.parse(raw.toString('utf8'))), raw };
  }

  /** Writes `key` over exactly `expected` (undefined: where there is none), with `alongside` (a fence); false when it changed. */
  replace(key: NamedKey, expected: Buffer | undefined, alongside: PreparedWrite[] = []): Promise<boolean> {
    return this.#view.transaction([{ type: 'put', key: `key/${key.name}`, value: Buffer.from(JSON.stringify(key)) }], [{ key: `key/${key.name}`, expected }], alongside);
  }

  delete(name: string): Promise<void> {
    return this.#view.delete(`key/${name}`);
  }

  async names(): Promise<string[]> {
    return (await this.#view.list('key/')).filter((k) => !k.endsWith('/')).sort();
  }
}
