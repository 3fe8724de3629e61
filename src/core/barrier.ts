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

/**
 * `sealsReserved` bounds the seals made under the term from above (see `BarrierOptions`); keyrings written before
 * the count existed have none.
 */
interface KeyringEntry { term: number; key: Buffer; installTime: string; sealsReserved?: number }

export interface BarrierOptions {
  /**
   * Seals under one data key before a new term is added. Random 96-bit nonces keep AES-GCM within NIST's bounds
   * for 2^32 messages per key; 2^30 leaves room for the over-counting below and for a rotation under way.
   */
  rotateAfterSeals?: number;
  /**
   * Seals reserved by one keyring write. The count lives in memory; the keyring records how far it may have got,
   * rounded up to the next block, and is written again (alongside the write that passes it) only when the count
   * passes that mark. After a crash the count resumes from the mark: at most one block over, never under.
   */
  reservationBlock?: number;
}

const DEFAULT_ROTATE_AFTER_SEALS = 2 ** 30;
const DEFAULT_RESERVATION_BLOCK = 2 ** 20;

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

/** A keyring write riding along with data writes, and what its landing proves. */
interface Reservation { op: StorageOp; landed(applied: boolean): void }

export class Barrier implements Storage {
  readonly #inner: Storage;
  readonly #rotateAfter: number;
  readonly #block: number;
  /** Every term, including one a rotation under way is adding. */
  #ring: KeyringEntry[] = [];
  #keys = new Map<number, Buffer>();
  /** The term that seals; a new term takes over only once the keyring holding it has landed. */
  #active: KeyringEntry | undefined;
  #rootKey: Buffer | undefined;
  /** Seals under the active term: exact since it was installed, or counted from its reservation after an unseal. */
  #seals = 0;
  /** The reservation of the active term known to be in storage. */
  #landedReservation = 0;
  /** Rotations run one after another, so terms take over in the order they were added. */
  #rotations: Promise<unknown> = Promise.resolve();
  #autoRotating = false;
  /**
   * Plaintext by ciphertext object. The storage below caches committed ciphertexts, so a hot entry (a token,
   * a policy, a config) comes back as the same Buffer and need not be decrypted again; a write stores a new
   * Buffer, and an evicted one takes its plaintext with it. Memory already holds the keyring, so this adds
   * no exposure a memory reader would not have anyway.
   */
  readonly #opened = new WeakMap<Buffer, Buffer>();

  constructor(inner: Storage, options: BarrierOptions = {}) {
    this.#inner = inner;
    this.#rotateAfter = options.rotateAfterSeals ?? DEFAULT_ROTATE_AFTER_SEALS;
    this.#block = options.reservationBlock ?? DEFAULT_RESERVATION_BLOCK;
  }

  async isInitialized(): Promise<boolean> {
    return (await this.#inner.get(ROOT_KEY_PATH)) !== undefined;
  }

  /** First start: a fresh root key sealed by the unseal key, and a keyring with term 1. */
  async initialize(unsealKey: Buffer): Promise<void> {
    const rootKey = randomBytes(32);
    const entry = this.#newEntry(1);
    await this.#inner.transaction([
      { type: 'put', key: ROOT_KEY_PATH, value: seal(unsealKey, 0, ROOT_KEY_PATH, rootKey) },
      { type: 'put', key: KEYRING_PATH, value: seal(rootKey, 0, KEYRING_PATH, encodeKeyring([entry])) },
    ]);
    await this.unseal(unsealKey);
    // The term is new: its count starts from nothing, not from its reservation.
    this.#seals = 0;
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
    this.#ring = decodeKeyring(open(() => rootKey, KEYRING_PATH, sealedRing));
    this.#keys = new Map(this.#ring.map((e) => [e.term, e.key]));
    const active = this.#ring.reduce((a, b) => (b.term > a.term ? b : a));
    // As many seals as the keyring reserved may have been made; a keyring from before the count existed
    // cannot tell, so its term is taken as used up. A term used up is replaced before it seals again.
    this.#seals = active.sealsReserved ?? this.#rotateAfter;
    this.#landedReservation = this.#seals;
    this.#rootKey = rootKey;
    this.#active = active;
    if (this.#seals >= this.#rotateAfter) await this.rotate();
  }

  get sealed(): boolean {
    return this.#active === undefined;
  }

  /** Adds a new data-key term; existing values keep decrypting with their own term. */
  rotate(): Promise<number> {
    this.#requireActive();
    const rotation = this.#rotations.then(() => this.#addTerm(), () => this.#addTerm());
    this.#rotations = rotation;
    return rotation;
  }

  get term(): number {
    return this.#requireActive().term;
  }

  /** When the active term was installed (empty for terms of older keyrings, which did not keep it). */
  get installTime(): string {
    return this.#requireActive().installTime;
  }

  /** Seals under the active term (after an unseal, counted from its reservation: possibly more, never fewer). */
  get encryptions(): number {
    this.#requireActive();
    return this.#seals;
  }

  async get(key: string): Promise<Buffer | undefined> {
    const blob = await this.#inner.get(key);
    return blob === undefined ? undefined : Buffer.from(this.#plaintextOf(key, blob));
  }
  put(key: string, value: Buffer): Promise<void> {
    const sealed = this.#seal(key, value);
    const reservation = this.#reservation();
    if (!reservation) return this.#inner.put(key, sealed);
    return this.#inner.transaction([{ type: 'put', key, value: sealed }, reservation.op]).then(reservation.landed);
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
    // Sealed and handed to the store in one synchronous stretch, so writes reach the store in the order their seals
    // were counted, and a keyring written along reaches it after every keyring built before it.
    const sealedOps = ops.map((op): StorageOp => (op.type === 'put' ? { type: 'put', key: op.key, value: this.#seal(op.key, op.value) } : op));
    const reservation = ops.some((op) => op.type === 'put') ? this.#reservation() : undefined;
    if (reservation) sealedOps.push(reservation.op);
    const applied = await this.#inner.transaction(sealedOps, physical);
    reservation?.landed(applied);
    return applied;
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

  #newEntry(term: number): KeyringEntry {
    return { term, key: randomBytes(32), installTime: new Date().toISOString(), sealsReserved: this.#block };
  }

  /**
   * The new term joins the ring before the keyring is written, so every keyring written from now on (reservations
   * included) holds it; it seals only once its keyring has landed. A failed write leaves it in the ring unused, and
   * the next rotation adds the term after it.
   */
  async #addTerm(): Promise<number> {
    const next = this.#newEntry(Math.max(...this.#keys.keys()) + 1);
    this.#ring.push(next);
    this.#keys.set(next.term, next.key);
    await this.#inner.put(KEYRING_PATH, this.#sealedKeyring());
    this.#active = next;
    this.#seals = 0;
    this.#landedReservation = next.sealsReserved!;
    return next.term;
  }

  /**
   * The keyring write a data write must carry when its seals go past the reservation in storage: the reservation
   * is raised to the block after the count, and recorded as landed only if that write lands. Until one does, every
   * sealing write carries it (a failed compare-and-set writes nothing, the keyring included).
   */
  #reservation(): Reservation | undefined {
    if (this.#seals <= this.#landedReservation) return undefined;
    const active = this.#active!;
    const reserved = (Math.floor(this.#seals / this.#block) + 1) * this.#block;
    active.sealsReserved = Math.max(active.sealsReserved ?? 0, reserved);
    return {
      op: { type: 'put', key: KEYRING_PATH, value: this.#sealedKeyring() },
      landed: (applied) => {
        if (applied && this.#active === active) this.#landedReservation = Math.max(this.#landedReservation, reserved);
      },
    };
  }

  #sealedKeyring(): Buffer {
    return seal(this.#rootKey!, 0, KEYRING_PATH, encodeKeyring(this.#ring));
  }

  #rotateWhenDue(): void {
    if (this.#seals < this.#rotateAfter || this.#autoRotating) return;
    this.#autoRotating = true;
    // A failed rotation is tried again at the next seal; the write that failed it reports the storage error.
    void this.rotate().catch(() => undefined).finally(() => {
      this.#autoRotating = false;
    });
  }

  /**
   * Encrypts a value being written and remembers its plaintext (a copy: the caller keeps its Buffer), so the
   * next read or compare-and-set of what was just written does not decrypt it again.
   */
  #seal(path: string, plaintext: Buffer): Buffer {
    const active = this.#requireActive();
    const blob = seal(active.key, active.term, path, plaintext);
    this.#seals++;
    this.#rotateWhenDue();
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
  return Buffer.from(JSON.stringify(entries.map((e) => ({ term: e.term, key: e.key.toString('base64'), install_time: e.installTime, seals_reserved: e.sealsReserved }))));
}
function decodeKeyring(raw: Buffer): KeyringEntry[] {
  const parsed = JSON.parse(raw.toString()) as Array<{ term: number; key: string; install_time: string; seals_reserved?: number }>;
  return parsed.map((e) => ({ term: e.term, key: Buffer.from(e.key, 'base64'), installTime: e.install_time, sealsReserved: e.seals_reserved }));
}
