import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import type { StorageView } from './storage/view.ts';

const BUCKET_MS = 60_000;
/**
 * Expiry revocations running at once. After a long downtime every overdue lease falls due together; the
 * rest queue instead of hammering the directory or the cloud (Vault's thundering herd after restore).
 */
const EXPIRY_CONCURRENCY = 64;
/** Leases due within this window are held as timers; the rest wait in the storage time index. */
const HORIZON_MS = 5 * 60_000;
/**
 * On a shared store a lease registered on another node is not armed there (only the leader expires leases): the
 * leader reads the index buckets around now this often, so such a lease is expired at most this late.
 */
const NEAR_SCAN_MS = 1000;
export const bucketName = (ms: number) => String(Math.floor(ms / BUCKET_MS)).padStart(13, '0');

/** What the scheduler needs of a lease: when it falls due, and whether it waits for an operator instead. */
export interface DueLease {
  id: string;
  expireTime: number;
  nextAttempt: number;
  irrevocable: boolean;
}

/** When a lease falls due: its next revocation attempt after a failure, else its expiry. */
export function dueAt(entry: DueLease): number {
  return entry.nextAttempt || entry.expireTime;
}

export interface LeaseExpiryDeps {
  view: StorageView;
  clock: Clock;
  logger: Logger;
  /** A shared store (several nodes): leases registered on other nodes are found by scanning the buckets around now. */
  shared: boolean;
  /** The lease registry: reads a lease afresh and revokes it as the leader's expiry. */
  leases: { get(id: string): Promise<DueLease | undefined>; revoke(id: string, opts: { expiry: true }): Promise<void> };
  /** Records a failed expiry revocation (backoff, or irrevocable past the retries). */
  failed(id: string, err: unknown): Promise<void>;
  /** Whether a revocation of the lease is running now. */
  revoking(id: string): boolean;
  /** Runs `fn` outside any lease operation's context. */
  outside<T>(fn: () => T): T;
}

/**
 * The expiry scheduler. Start-up never loads every lease: a time index (`time/<minute>/<hash>`, written by the
 * registry) lets it arm timers only for what falls due soon, topping up as time passes. It runs on the cluster's
 * leader only (between `start` and `stop`), and re-reads a lease before expiring it (a renewal on another node moved
 * it without disarming the leader's timer).
 */
export class LeaseExpiry {
  readonly #d: LeaseExpiryDeps;
  readonly #timers = new Map<string, () => void>();
  #loadedUntil = 0;
  #expiring = 0;
  readonly #expiryQueue: string[] = [];
  #stopScan: (() => void) | undefined;
  #stopNearScan: (() => void) | undefined;
  /** Expiry runs only between start() (this node leads) and stop(). */
  #stopped = true;

  constructor(deps: LeaseExpiryDeps) {
    this.#d = deps;
  }

  /** Starts expiring leases (this node leads): arms what falls due soon, and keeps scanning. */
  async start(): Promise<void> {
    if (!this.#stopped) return;
    this.#stopped = false;
    this.#loadedUntil = 0;
    await this.#scan();
    this.#stopScan = this.#repeat(HORIZON_MS / 2, () => this.#scan());
    if (this.#d.shared) this.#stopNearScan = this.#repeat(NEAR_SCAN_MS, () => this.#scanNear());
  }

  stop(): void {
    this.#stopped = true;
    this.#stopScan?.();
    this.#stopNearScan?.();
    for (const cancel of this.#timers.values()) cancel();
    this.#timers.clear();
    this.#expiryQueue.length = 0;
  }

  /** Runs `scan` every `ms` after the previous run ended, until stopped. */
  #repeat(ms: number, scan: () => Promise<void>): () => void {
    let cancel = () => {};
    const tick = () => {
      cancel = this.#d.clock.setTimer(ms, () => {
        void scan().catch((err) => this.#d.logger.error({ err }, 'lease scan failed')).finally(() => { if (!this.#stopped) tick(); });
      });
    };
    tick();
    return () => cancel();
  }

  #expire(id: string): void {
    this.#timers.delete(id);
    this.#expiryQueue.push(id);
    this.#drainExpiries();
  }

  #drainExpiries(): void {
    while (this.#expiring < EXPIRY_CONCURRENCY && this.#expiryQueue.length > 0 && !this.#stopped) {
      const id = this.#expiryQueue.shift()!;
      this.#expiring++;
      void this.#expireIfDue(id)
        .catch((err) => this.#d.failed(id, err))
        .catch((err) => this.#d.logger.error({ lease_id: id, err }, 'recording a failed revocation failed'))
        .finally(() => {
          this.#expiring--;
          this.#drainExpiries();
        });
    }
  }

  /** A renewal elsewhere may have moved the lease since its timer was armed here: then it is armed again instead. */
  async #expireIfDue(id: string): Promise<void> {
    const entry = await this.#d.leases.get(id);
    if (!entry || entry.irrevocable) return;
    if (dueAt(entry) > this.#d.clock.now()) {
      this.armIfSoon(entry);
      return;
    }
    await this.#d.leases.revoke(id, { expiry: true });
  }

  disarm(id: string): void {
    this.#timers.get(id)?.();
    this.#timers.delete(id);
  }

  armIfSoon(entry: DueLease): void {
    if (this.#stopped || entry.irrevocable) return;
    const due = dueAt(entry);
    if (due > this.#d.clock.now() + HORIZON_MS && due >= this.#loadedUntil) return;
    this.#timers.get(entry.id)?.();
    // Outside any operation's context: the expiry is an operation of its own, which a move must wait for.
    this.#timers.set(entry.id, this.#d.outside(() => this.#d.clock.setTimer(due - this.#d.clock.now(), () => this.#expire(entry.id))));
  }

  /** Arms timers for every index bucket up to now + horizon (leases already armed are passed over). */
  async #scan(): Promise<void> {
    const limit = bucketName(this.#d.clock.now() + HORIZON_MS);
    for (const folder of await this.#d.view.list('time/')) {
      const bucket = folder.slice(0, -1);
      if (bucket > limit) break;
      await this.#armBucket(bucket);
    }
    this.#loadedUntil = (Number(limit) + 1) * BUCKET_MS;
  }

  /** The buckets around now only: what other nodes registered lately (the full scan finds older leftovers). */
  async #scanNear(): Promise<void> {
    const now = this.#d.clock.now();
    for (let minute = Math.floor(now / BUCKET_MS) - 1; minute * BUCKET_MS <= now + HORIZON_MS; minute++) await this.#armBucket(bucketName(minute * BUCKET_MS));
  }

  async #armBucket(bucket: string): Promise<void> {
    for (const key of await this.#d.view.list(`time/${bucket}/`)) {
      if (this.#stopped) return;
      const id = (await this.#d.view.get(`time/${bucket}/${key}`))?.toString();
      if (!id || this.#timers.has(id) || this.#d.revoking(id)) continue;
      const entry = await this.#d.leases.get(id);
      if (entry) this.armIfSoon(entry);
    }
  }
}
