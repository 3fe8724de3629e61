import { randomBytes } from 'node:crypto';
import { decodeKeyring, encodeKeyring, open, seal, UnsealError, type KeyringEntry } from './barrier-format.ts';
import { LayeredStorage } from './storage/layered.ts';
import type { EventLog, Storage, StorageCondition, StorageOp } from './storage/types.ts';

export { decodeUnsealKey, open, seal, UnsealError } from './barrier-format.ts';

/**
 * Everything the server stores passes through here: AES-256-GCM with a random 96-bit nonce and the storage
 * path as associated data, so a ciphertext cannot be replayed under another key. The data key lives in a
 * keyring with terms (rotation adds a term; old terms still decrypt); the keyring is sealed by the root key,
 * and the root key by the operator's unseal key. The formats (a ciphertext, the keyring's stored form, an unseal
 * key as typed) are `barrier-format.ts`; this file keeps the keys, counts the seals and rotates.
 */
export const KEYRING_PATH = 'core/keyring';
const ROOT_KEY_PATH = 'core/root-key';
/**
 * What the event log's records are sealed to (their AAD): no key can hold a NUL, so a record cannot be passed off as an
 * entry, or an entry as a record.
 */
const EVENT_LOG_PATH = '\u0000event-log';

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

/** A keyring write riding along with data writes, the guard it needs (the ring it raises), and what its landing proves. */
interface Reservation { op: StorageOp; guard: StorageCondition; landed(applied: boolean): void }

/** How many times a write retries when other nodes keep changing the keyring under it: each retry follows a change. */
const KEYRING_RACES = 20;

/**
 * How automatic rotations coordinate across a cluster (set by the core): only the leader adds terms by count, under
 * its fence. Without it (tests of the barrier alone), the barrier rotates by itself.
 */
export interface RotationCoordination {
  mayRotate(): boolean;
  fence(): StorageCondition[];
}

export class Barrier extends LayeredStorage {
  readonly #rotateAfter: number;
  readonly #block: number;
  /** The keyring as last read from, or written to, the store: every term, oldest first. */
  #ring: KeyringEntry[] = [];
  /** Its stored bytes, which every keyring write expects to replace (a compare-and-set, since other nodes write it). */
  #ringBlob: Buffer | undefined;
  /** Keyrings this node has written and not yet heard back about (a reload finding one of them is not news). */
  readonly #inFlight = new Set<Buffer>();
  #keys = new Map<number, Buffer>();
  /** The newest stored term, which seals; a new term takes over only once a keyring holding it is known stored. */
  #active: KeyringEntry | undefined;
  #rootKey: Buffer | undefined;
  /**
   * Seals under the active term: exact since this node installed it; otherwise counted from its reservation (after
   * an unseal or a takeover), plus every block other nodes reserved since, as if they had used all of it.
   */
  #seals = 0;
  /** The reservation of the active term known to be in storage. */
  #landedReservation = 0;
  /** Rotations run one after another, so terms take over in the order they were added. */
  #rotations: Promise<unknown> = Promise.resolve();
  #autoRotating = false;
  #coordination: RotationCoordination = { mayRotate: () => true, fence: () => [] };
  /**
   * Plaintext by ciphertext object. The storage below caches committed ciphertexts, so a hot entry (a token,
   * a policy, a config) comes back as the same Buffer and need not be decrypted again; a write stores a new
   * Buffer, and an evicted one takes its plaintext with it. Memory already holds the keyring, so this adds
   * no exposure a memory reader would not have anyway.
   */
  #opened = new WeakMap<Buffer, Buffer>();

  constructor(inner: Storage, options: BarrierOptions = {}) {
    super(inner);
    this.#rotateAfter = options.rotateAfterSeals ?? DEFAULT_ROTATE_AFTER_SEALS;
    this.#block = options.reservationBlock ?? DEFAULT_RESERVATION_BLOCK;
  }

  coordinate(coordination: RotationCoordination): void {
    this.#coordination = coordination;
  }

  async isInitialized(): Promise<boolean> {
    return (await this.inner.get(ROOT_KEY_PATH)) !== undefined;
  }

  /**
   * First start: a fresh root key sealed by the unseal key, and a keyring with term 1, both written only where neither
   * exists. False when another node initialised the store first: nothing was written, and the caller unseals the
   * store that node made (with the same unseal key, or not at all).
   */
  async initialize(unsealKey: Buffer): Promise<boolean> {
    const rootKey = randomBytes(32);
    const entry = this.#newEntry(1);
    const ring = seal(rootKey, 0, KEYRING_PATH, encodeKeyring([entry]));
    const won = await this.inner.transaction([
      { type: 'put', key: ROOT_KEY_PATH, value: seal(unsealKey, 0, ROOT_KEY_PATH, rootKey) },
      { type: 'put', key: KEYRING_PATH, value: ring },
    ], [{ key: ROOT_KEY_PATH, expected: undefined }, { key: KEYRING_PATH, expected: undefined }]);
    if (!won) return false;
    this.#rootKey = rootKey;
    // The term is new: its count starts from nothing, not from its reservation.
    this.#adopt(ring, { installed: true });
    return true;
  }

  /** Throws UnsealError when the key is wrong; nothing is written either way. */
  async unseal(unsealKey: Buffer): Promise<void> {
    const sealedRoot = await this.inner.get(ROOT_KEY_PATH);
    const sealedRing = await this.inner.get(KEYRING_PATH);
    if (!sealedRoot || !sealedRing) throw new UnsealError('storage is not initialised');
    try {
      this.#rootKey = open(() => unsealKey, ROOT_KEY_PATH, sealedRoot);
    } catch {
      throw new UnsealError('unseal failed: the unseal key does not open this store (wrong key?)');
    }
    this.#adopt(sealedRing);
    // A term used up is replaced before it seals again; of several nodes unsealing at once, one replaces it.
    if (this.#seals >= this.#rotateAfter) await this.#queueRotation({ onlyIfDue: true, fenced: false });
  }

  /** Whether `unsealKey` opens this store's root key (sys/generate-root, sys/unseal); nothing is kept or written. */
  async opensWith(unsealKey: Buffer): Promise<boolean> {
    const sealedRoot = await this.inner.get(ROOT_KEY_PATH);
    if (!sealedRoot) return false;
    try {
      open(() => unsealKey, ROOT_KEY_PATH, sealedRoot);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Forgets every key (sys/seal): from now on nothing is sealed or opened until `unseal` is called again. Remembered
   * plaintexts go with them; what is stored stays as it is.
   */
  seal(): void {
    this.#rootKey = undefined;
    this.#active = undefined;
    this.#keys = new Map();
    this.#ring = [];
    this.#ringBlob = undefined;
    this.#opened = new WeakMap();
  }

  /**
   * Reads the keyring again (another node may have rotated it or reserved seals), adopting what changed. Called on
   * the cluster's change notice and when a value names a term this node does not know.
   */
  async reload(): Promise<void> {
    if (!this.#rootKey) return;
    const blob = await this.inner.get(KEYRING_PATH);
    if (!blob || (this.#ringBlob && blob.equals(this.#ringBlob)) || [...this.#inFlight].some((b) => b.equals(blob))) return;
    this.#adopt(blob);
    this.#rotateWhenDue();
  }

  get sealed(): boolean {
    return this.#active === undefined;
  }

  /** Adds a new data-key term; existing values keep decrypting with their own term. */
  rotate(): Promise<number> {
    this.#requireActive();
    return this.#queueRotation({ onlyIfDue: false, fenced: false });
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

  /** A copy of the plaintext: the one remembered for the ciphertext is handed out only by `peek`. */
  get(key: string): Promise<Buffer | undefined> {
    return this.peek(key).then((plain) => plain && Buffer.from(plain));
  }
  /** The plaintext remembered for the stored ciphertext itself (see Storage.peek: never to be changed). */
  peek(key: string): Promise<Buffer | undefined> {
    return this.inner.get(key).then((blob) => blob && this.#plaintextOf(key, blob));
  }
  async put(key: string, value: Buffer): Promise<void> {
    const sealed = this.#seal(key, value);
    if (!this.#reservationDue()) return this.inner.put(key, sealed);
    await this.#write([{ type: 'put', key, value: sealed }], []);
  }
  delete(key: string): Promise<void> {
    return this.inner.delete(key);
  }
  list(prefix: string): Promise<string[]> {
    return this.inner.list(prefix);
  }
  /**
   * Conditions name plaintext; ciphertexts differ per write, so each guard is turned into a guard on the
   * ciphertext currently stored (read, decrypt, compare, then CAS on those exact bytes).
   */
  async transaction(ops: StorageOp[], conditions: StorageCondition[] = []): Promise<boolean> {
    const physical: StorageCondition[] = [];
    for (const c of conditions) {
      const blob = await this.inner.get(c.key);
      const current = blob === undefined ? undefined : await this.#plaintextOf(c.key, blob);
      if (current === undefined ? c.expected !== undefined : c.expected === undefined || !current.equals(c.expected)) return false;
      physical.push({ key: c.key, expected: blob });
    }
    // Sealed and handed to the store in one synchronous stretch, so writes reach the store in the order their seals
    // were counted, and a keyring written along reaches it after every keyring built before it.
    const sealedOps = ops.map((op): StorageOp => {
      if (op.type === 'put') return { type: 'put', key: op.key, value: this.#seal(op.key, op.value) };
      return op.type === 'append' ? { type: 'append', value: this.#seal(EVENT_LOG_PATH, op.value) } : op;
    });
    return this.#write(sealedOps, physical);
  }

  /**
   * Writes sealed operations, carrying a keyring reservation when the seals went past the stored one. That keyring
   * replaces the one this node knows, so it is guarded on it: when another node changed the keyring meanwhile (a
   * reservation or a rotation of its own), the write is refused whole; the barrier then adopts the stored keyring and
   * tries again with a reservation built on it. A refusal for the caller's own conditions is the caller's answer.
   */
  async #write(sealedOps: StorageOp[], physical: StorageCondition[]): Promise<boolean> {
    for (let race = 0; ; race++) {
      const reservation = sealedOps.some((op) => op.type !== 'delete') ? this.#reservation() : undefined;
      if (!reservation) return this.inner.transaction(sealedOps, physical);
      const applied = await this.inner.transaction([...sealedOps, reservation.op], [...physical, reservation.guard]);
      reservation.landed(applied);
      if (applied) return true;
      const stored = await this.inner.get(KEYRING_PATH);
      if (stored && reservation.guard.expected && stored.equals(reservation.guard.expected)) return false;
      if (race === KEYRING_RACES) throw new Error('the keyring kept changing under a write; try again');
      if (stored && !(this.#ringBlob && stored.equals(this.#ringBlob))) this.#adopt(stored);
    }
  }

  /** The event log with its records opened (they are sealed like entries, bound to one path of their own). */
  override get log(): EventLog {
    const inner = this.inner.log;
    return {
      read: async (after, limit) => Promise.all((await inner.read(after, limit)).map(async (r) => ({ ...r, value: await this.#plaintextOf(EVENT_LOG_PATH, r.value) }))),
      trim: (before, keep) => inner.trim(before, keep),
      stats: () => inner.stats(),
      head: () => inner.head(),
    };
  }

  #newEntry(term: number): KeyringEntry {
    return { term, key: randomBytes(32), installTime: new Date().toISOString(), sealsReserved: this.#block };
  }

  /**
   * Makes a stored keyring this node's: its terms decrypt, its newest term seals. A term this node did not install is
   * counted from its reservation, as if every reserved seal had been made (as after a restart); a keyring from before
   * the count existed cannot tell, so its term is taken as used up. For the active term, reservations other nodes
   * added since this node last looked are added to its count: their seals are as real as its own.
   */
  #adopt(blob: Buffer, { installed = false } = {}): void {
    const ring = decodeKeyring(open(() => this.#rootKey, KEYRING_PATH, blob));
    const newest = ring.reduce((a, b) => (b.term > a.term ? b : a));
    const reserved = newest.sealsReserved ?? this.#rotateAfter;
    if (installed) {
      this.#seals = 0;
      this.#landedReservation = reserved;
    } else if (newest.term === this.#active?.term) {
      this.#seals += Math.max(0, reserved - this.#landedReservation);
      this.#landedReservation = Math.max(this.#landedReservation, reserved);
    } else {
      this.#seals = reserved;
      this.#landedReservation = reserved;
    }
    this.#ring = ring;
    this.#ringBlob = blob;
    this.#keys = new Map(ring.map((e) => [e.term, e.key]));
    this.#active = newest;
  }

  #queueRotation(how: { onlyIfDue: boolean; fenced: boolean }): Promise<number> {
    const rotation = this.#rotations.then(() => this.#addTerm(how), () => this.#addTerm(how));
    this.#rotations = rotation;
    return rotation;
  }

  /**
   * Adds term n+1 to the keyring as stored, guarded on that keyring, and lets it seal once the write has landed, so a
   * value is never stored under a key that is not stored itself. When another node changed the keyring first, the
   * barrier adopts it and tries again: a rotation by hand always adds its term; one by count (`onlyIfDue`) stops
   * when the term it meant to replace is gone or no longer used up. Automatic ones carry the leader's fence.
   */
  async #addTerm({ onlyIfDue, fenced }: { onlyIfDue: boolean; fenced: boolean }): Promise<number> {
    for (let race = 0; ; race++) {
      if (onlyIfDue && this.#seals < this.#rotateAfter) return this.#active!.term;
      const next = this.#newEntry(Math.max(...this.#keys.keys()) + 1);
      const blob = seal(this.#rootKey!, 0, KEYRING_PATH, encodeKeyring([...this.#ring, next]));
      const fence = fenced ? this.#coordination.fence() : [];
      const base = this.#ringBlob;
      this.#inFlight.add(blob);
      let applied: boolean;
      try {
        applied = await this.inner.transaction([{ type: 'put', key: KEYRING_PATH, value: blob }], [{ key: KEYRING_PATH, expected: base }, ...fence]);
      } finally {
        this.#inFlight.delete(blob);
      }
      if (applied) {
        this.#adopt(blob, { installed: true });
        return next.term;
      }
      const stored = await this.inner.get(KEYRING_PATH);
      // The keyring is as it was: the fence failed, so this node no longer leads and leaves rotating to the leader.
      if (!stored || (base && stored.equals(base)) || race === KEYRING_RACES) return this.#active!.term;
      if (!(this.#ringBlob && stored.equals(this.#ringBlob))) this.#adopt(stored);
    }
  }

  #reservationDue(): boolean {
    return this.#seals > this.#landedReservation;
  }

  /**
   * The keyring write a data write must carry when its seals go past the reservation in storage: the reservation
   * is raised to the block after the count, and recorded as landed only if that write lands. Until one does, every
   * sealing write carries it (a failed compare-and-set writes nothing, the keyring included).
   */
  #reservation(): Reservation | undefined {
    if (!this.#reservationDue()) return undefined;
    const { term } = this.#active!;
    const base = this.#ringBlob;
    const reserved = (Math.floor(this.#seals / this.#block) + 1) * this.#block;
    const ring = this.#ring.map((e) => (e.term === term ? { ...e, sealsReserved: Math.max(e.sealsReserved ?? 0, reserved) } : e));
    const blob = seal(this.#rootKey!, 0, KEYRING_PATH, encodeKeyring(ring));
    this.#inFlight.add(blob);
    return {
      op: { type: 'put', key: KEYRING_PATH, value: blob },
      guard: { key: KEYRING_PATH, expected: base },
      landed: (applied) => {
        this.#inFlight.delete(blob);
        if (!applied || this.#active?.term !== term) return;
        this.#landedReservation = Math.max(this.#landedReservation, reserved);
        // Unless a keyring read meanwhile is newer (a reload that raced this answer), this one is the stored one now.
        if (this.#ringBlob !== base) return;
        this.#ring = ring;
        this.#ringBlob = blob;
        this.#active = ring.find((e) => e.term === term)!;
      },
    };
  }

  #rotateWhenDue(): void {
    if (this.#seals < this.#rotateAfter || this.#autoRotating || !this.#coordination.mayRotate()) return;
    this.#autoRotating = true;
    // A failed rotation is tried again at the next seal; the write that failed it reports the storage error.
    void this.#queueRotation({ onlyIfDue: true, fenced: true }).catch(() => undefined).finally(() => {
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
  /**
   * A value sealed under a term this node has not seen (another node rotated) makes it read the keyring once. Every
   * other value opens synchronously: a read on the hot path waits for nothing more than its storage call.
   */
  #plaintextOf(path: string, blob: Buffer): Buffer | Promise<Buffer> {
    const known = this.#opened.get(blob);
    if (known) return known;
    this.#requireActive();
    if (blob.length >= 4 && !this.#keys.has(blob.readUInt32BE(0))) return this.reload().then(() => this.#open(path, blob));
    return this.#open(path, blob);
  }
  #open(path: string, blob: Buffer): Buffer {
    const plain = open((t) => this.#keys.get(t), path, blob);
    this.#opened.set(blob, plain);
    return plain;
  }
  #requireActive(): KeyringEntry {
    if (!this.#active) throw new UnsealError('barrier is sealed');
    return this.#active;
  }
}
