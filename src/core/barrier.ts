import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { secureRandomBytes } from './random.ts';
import type { Storage, StorageCondition, StorageOp } from './storage/types.ts';

/**
 * Everything the server stores passes through here: AES-256-GCM with a random 96-bit nonce and the storage
 * path as associated data, so a ciphertext cannot be replayed under another key. The data key lives in a
 * keyring with terms (rotation adds a term; old terms still decrypt); the keyring is sealed by the root key,
 * and the root key by the operator's unseal key.
 */
const VERSION = 2;
const KEYRING_PATH = 'core/keyring';
const ROOT_KEY_PATH = 'core/root-key';

export class UnsealError extends Error {}

interface KeyringEntry { term: number; key: Buffer; installTime: string }

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

export class Barrier implements Storage {
  readonly #inner: Storage;
  #keys = new Map<number, Buffer>();
  #active: KeyringEntry | undefined;
  #rootKey: Buffer | undefined;
  /**
   * Plaintext by ciphertext object. The storage below caches committed ciphertexts, so a hot entry (a token,
   * a policy, a config) comes back as the same Buffer and need not be decrypted again; a write stores a new
   * Buffer, and an evicted one takes its plaintext with it. Memory already holds the keyring, so this adds
   * no exposure a memory reader would not have anyway.
   */
  readonly #opened = new WeakMap<Buffer, Buffer>();

  constructor(inner: Storage) {
    this.#inner = inner;
  }

  async isInitialized(): Promise<boolean> {
    return (await this.#inner.get(ROOT_KEY_PATH)) !== undefined;
  }

  /** First start: a fresh root key sealed by the unseal key, and a keyring with term 1. */
  async initialize(unsealKey: Buffer): Promise<void> {
    const rootKey = randomBytes(32);
    const entry: KeyringEntry = { term: 1, key: randomBytes(32), installTime: new Date().toISOString() };
    await this.#inner.transaction([
      { type: 'put', key: ROOT_KEY_PATH, value: seal(unsealKey, 0, ROOT_KEY_PATH, rootKey) },
      { type: 'put', key: KEYRING_PATH, value: seal(rootKey, 0, KEYRING_PATH, encodeKeyring([entry])) },
    ]);
    await this.unseal(unsealKey);
  }

  /** Throws UnsealError when the key is wrong; nothing is written either way. */
  async unseal(unsealKey: Buffer): Promise<void> {
    const sealedRoot = await this.#inner.get(ROOT_KEY_PATH);
    const sealedRing = await this.#inner.get(KEYRING_PATH);
    if (!sealedRoot || !sealedRing) throw new UnsealError('storage is not initialised');
    let rootKey: Buffer;
    try {
      rootKey = open(() => unsealKey, ROOT_KEY_PATH, sealedRoot);
    } catch {
      throw new UnsealError('unseal failed: the unseal key does not open this store (wrong key?)');
    }
    const entries = decodeKeyring(open(() => rootKey, KEYRING_PATH, sealedRing));
    this.#keys = new Map(entries.map((e) => [e.term, e.key]));
    this.#active = entries.reduce((a, b) => (b.term > a.term ? b : a));
    this.#rootKey = rootKey;
  }

  get sealed(): boolean {
    return this.#active === undefined;
  }

  /** Adds a new data-key term; existing values keep decrypting with their own term. */
  async rotate(): Promise<number> {
    const active = this.#requireActive();
    const next: KeyringEntry = { term: active.term + 1, key: randomBytes(32), installTime: new Date().toISOString() };
    const all = [...this.#keys.entries()].map(([term, key]) => ({ term, key, installTime: term === active.term ? active.installTime : '' }));
    all.push(next);
    await this.#inner.put(KEYRING_PATH, seal(this.#rootKey!, 0, KEYRING_PATH, encodeKeyring(all)));
    this.#keys.set(next.term, next.key);
    this.#active = next;
    return next.term;
  }

  get term(): number {
    return this.#requireActive().term;
  }

  async get(key: string): Promise<Buffer | undefined> {
    const blob = await this.#inner.get(key);
    return blob === undefined ? undefined : Buffer.from(this.#plaintextOf(key, blob));
  }
  put(key: string, value: Buffer): Promise<void> {
    return this.#inner.put(key, this.#seal(key, value));
  }
  delete(key: string): Promise<void> {
    return this.#inner.delete(key);
  }
  list(prefix: string): Promise<string[]> {
    return this.#inner.list(prefix);
  }
  /**
   * Conditions name plaintext; ciphertexts differ per write, so each guard is turned into a guard on the
   * ciphertext currently stored (read, decrypt, compare, then CAS on those exact bytes).
   */
  async transaction(ops: StorageOp[], conditions: StorageCondition[] = []): Promise<boolean> {
    const physical: StorageCondition[] = [];
    for (const c of conditions) {
      const blob = await this.#inner.get(c.key);
      const current = blob === undefined ? undefined : this.#plaintextOf(c.key, blob);
      if (current === undefined ? c.expected !== undefined : c.expected === undefined || !current.equals(c.expected)) return false;
      physical.push({ key: c.key, expected: blob });
    }
    const sealedOps = ops.map((op): StorageOp => (op.type === 'put' ? { type: 'put', key: op.key, value: this.#seal(op.key, op.value) } : op));
    return this.#inner.transaction(sealedOps, physical);
  }
  close(): Promise<void> {
    return this.#inner.close();
  }
  get failure(): Error | undefined {
    return this.#inner.failure;
  }
  onFailure(listener: (err: Error) => void): void {
    this.#inner.onFailure(listener);
  }

  /**
   * Encrypts a value being written and remembers its plaintext (a copy: the caller keeps its Buffer), so the
   * next read or compare-and-set of what was just written does not decrypt it again.
   */
  #seal(path: string, plaintext: Buffer): Buffer {
    const blob = this.#encrypt(path, plaintext);
    this.#opened.set(blob, Buffer.from(plaintext));
    return blob;
  }
  #plaintextOf(path: string, blob: Buffer): Buffer {
    let plain = this.#opened.get(blob);
    if (!plain) {
      plain = this.#decrypt(path, blob);
      this.#opened.set(blob, plain);
    }
    return plain;
  }
  #encrypt(path: string, plaintext: Buffer): Buffer {
    const active = this.#requireActive();
    return seal(active.key, active.term, path, plaintext);
  }
  #decrypt(path: string, blob: Buffer): Buffer {
    this.#requireActive();
    return open((t) => this.#keys.get(t), path, blob);
  }
  #requireActive(): KeyringEntry {
    if (!this.#active) throw new UnsealError('barrier is sealed');
    return this.#active;
  }
}

function encodeKeyring(entries: KeyringEntry[]): Buffer {
  return Buffer.from(JSON.stringify(entries.map((e) => ({ term: e.term, key: e.key.toString('base64'), install_time: e.installTime }))));
}
function decodeKeyring(raw: Buffer): KeyringEntry[] {
  const parsed = JSON.parse(raw.toString()) as Array<{ term: number; key: string; install_time: string }>;
  return parsed.map((e) => ({ term: e.term, key: Buffer.from(e.key, 'base64'), installTime: e.install_time }));
}
