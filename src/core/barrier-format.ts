/**
 * The barrier's formats, without state: a value's ciphertext (AES-256-GCM, a random 96-bit nonce, the storage path as
 * associated data), the keyring's stored form, and an unseal key as an operator types it. The barrier that keeps the
 * keys and counts the seals is `barrier.ts`.
 */
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { secureRandomBytes } from './random.ts';

const VERSION = 2;

export class UnsealError extends Error {}

/**
 * An unseal key as an operator types it: base64 (as Strongroom writes its key file) or hex (as Vault's clients show
 * key shares); undefined unless it is 32 bytes either way.
 */
export function decodeUnsealKey(text: string): Buffer | undefined {
  const trimmed = text.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
  return key.length === 32 ? key : undefined;
}

/**
 * `sealsReserved` bounds the seals made under the term from above (see `BarrierOptions`); keyrings written before
 * the count existed have none.
 */
export interface KeyringEntry { term: number; key: Buffer; installTime: string; sealsReserved?: number }

/** Layout: term (4 bytes), version (1), nonce (12), ciphertext (as long as the plaintext: GCM is a stream mode), tag (16). */
export function seal(key: Buffer, term: number, path: string, plaintext: Buffer): Buffer {
  const out = Buffer.allocUnsafe(17 + plaintext.length + 16);
  out.writeUInt32BE(term, 0);
  out[4] = VERSION;
  const nonce = secureRandomBytes(12);
  nonce.copy(out, 5);
  const cipher = createCipheriv('aes-256-gcm', key, nonce);
  cipher.setAAD(Buffer.from(path));
  cipher.update(plaintext).copy(out, 17);
  cipher.final();
  cipher.getAuthTag().copy(out, 17 + plaintext.length);
  return out;
}

export function open(keyFor: (term: number) => Buffer | undefined, path: string, blob: Buffer): Buffer {
  if (blob.length < 5 + 12 + 16 || blob[4] !== VERSION) throw new UnsealError(`stored value at "${path}" is not a barrier ciphertext`);
  const term = blob.readUInt32BE(0);
  const key = keyFor(term);
  if (!key) throw new UnsealError(`no decryption key available for term ${term}`);
  const decipher = createDecipheriv('aes-256-gcm', key, blob.subarray(5, 17));
  decipher.setAAD(Buffer.from(path));
  decipher.setAuthTag(blob.subarray(blob.length - 16));
  // GCM's final() only checks the tag and returns nothing, so update's output is the whole plaintext.
  const plaintext = decipher.update(blob.subarray(17, blob.length - 16));
  decipher.final();
  return plaintext;
}

export function encodeKeyring(entries: KeyringEntry[]): Buffer {
  return Buffer.from(JSON.stringify(entries.map((e) => ({ term: e.term, key: e.key.toString('base64'), install_time: e.installTime, seals_reserved: e.sealsReserved }))));
}
export function decodeKeyring(raw: Buffer): KeyringEntry[] {
  const parsed = JSON.parse(raw.toString()) as Array<{ term: number; key: string; install_time: string; seals_reserved?: number }>;
  return parsed.map((e) => ({ term: e.term, key: Buffer.from(e.key, 'base64'), installTime: e.install_time, sealsReserved: e.seals_reserved }));
}
