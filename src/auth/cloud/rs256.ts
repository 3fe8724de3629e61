/**
 * RS256 (RSASSA-PKCS1-v1_5 with SHA-256) signatures checked with node:crypto's callback `verify`, which runs
 * on the libuv thread pool. jose 6 verifies through WebCrypto, and Node 24 performs that RSA operation on
 * the event loop: measured at about a quarter of the request thread's time per login. jose still decodes
 * the header; the claims are checked by the verifier.
 */
import { createPublicKey, verify, type JsonWebKey, type KeyObject } from 'node:crypto';

/** jose's floor for RS* keys, kept: a smaller modulus is refused even if the directory publishes it. */
const MIN_MODULUS_BITS = 2048;

interface Jwk { kty: string; kid?: string; use?: string; alg?: string; key_ops?: unknown }

/**
 * The key set's RSA signing keys by `kid`. Keys meant for encryption or another algorithm are left out, and a
 * `kid` published twice maps to undefined: a token naming it is refused rather than checked against a guess.
 */
export function importSigningKeys(keys: Jwk[]): Map<string, KeyObject | undefined> {
  const out = new Map<string, KeyObject | undefined>();
  for (const jwk of keys) {
    if (jwk.kty !== 'RSA' || !jwk.kid || (jwk.use !== undefined && jwk.use !== 'sig') || (jwk.alg !== undefined && jwk.alg !== 'RS256')) continue;
    if (Array.isArray(jwk.key_ops) && !jwk.key_ops.includes('verify')) continue;
    let key: KeyObject;
    try {
      key = createPublicKey({ key: jwk as JsonWebKey, format: 'jwk' });
    } catch {
      continue;
    }
    if ((key.asymmetricKeyDetails?.modulusLength ?? 0) < MIN_MODULUS_BITS) continue;
    out.set(jwk.kid, out.has(jwk.kid) ? undefined : key);
  }
  return out;
}

/** Whether `signature` (base64url) signs `signingInput` (`header.payload`) under `key`. */
export function verifyRs256(signingInput: string, signature: string, key: KeyObject): Promise<boolean> {
  return new Promise((resolve) => {
    verify('sha256', Buffer.from(signingInput), key, Buffer.from(signature, 'base64url'), (err, ok) => resolve(!err && ok));
  });
}
