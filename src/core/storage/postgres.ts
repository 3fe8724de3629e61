import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { MAX_KEY_LOCKS, migrate } from './postgres-schema.ts';
import { POSTGRES_DEFAULTS, type PostgresOptions } from './postgres-options.ts';
import { EVENTS_CHANNEL, PostgresSignals } from './postgres-signals.ts';
import { directChildren, StorageUnavailableError, type EventLog, type LogRecord, type SharedStorage, type Storage, type StorageCondition, type StorageOp } from './types.ts';

/** Connections for the cluster's coordination: the change version poll and the leader lease, never more than two at once. */
const COORDINATION_POOL_SIZE = 2;

/** The first failed probe after a lost connection is retried after this, doubling up to PROBE_MAX_MS. */
const PROBE_BASE_MS = 100;
const PROBE_MAX_MS = 2000;
/**
 * A statement the server should have cancelled by now but that has not answered: the connection is taken as lost
 * (a partitioned network answers nothing, and TCP alone would wait many minutes).
 */
const CLIENT_TIMEOUT_MARGIN_MS = 5000;


/**
 * A listing reads keys a batch at a time, in index order from $1 up to $2 (the first string past the prefix); the
 * empty prefix has no upper bound. A bound on both sides keeps each batch one range of the primary key's index.
 */
const LIST_BATCH = 1000;
export const RANGE_SQL = `SELECT key FROM strongroom_kv WHERE key >= $1 AND key < $2 ORDER BY key LIMIT ${LIST_BATCH}`;
const OPEN_RANGE_SQL = `SELECT key FROM strongroom_kv WHERE key >= $1 ORDER BY key LIMIT ${LIST_BATCH}`;

/**
 * Several server processes on one database (design.md, "Running more than one node"). Every call is one statement
 * and one transaction: a write is acknowledged once PostgreSQL has committed it (synchronous_commit), and a write
 * whose answer was lost with the connection either landed entirely or not at all. There is no value cache: another
 * node may have written since.
 *
 * Losing the database is a passing state, not a failure: the first connection error has the store probe the
 * database; while the probe fails the store is `unavailable` (every call is refused at once with that error, and
 * requests get 503), and it clears itself when a probe succeeds again.
 */
export class PostgresStorage implements Storage, SharedStorage {
  readonly #pool: pg.Pool;
  /**
   * The cluster's own connections (change version, leader lease), apart from the pool requests use: a node under
   * load must still see changes and renew its lease on time, not queue behind its own requests.
   */
  readonly #coordination: pg.Pool;
  #tracked: (key: string) => boolean = () => false;
  /** The database's address for messages: the URL with its password masked. */
  readonly #where: string;
  readonly #password: string;
  readonly #statementTimeoutMs: number;
  #unavailable: StorageUnavailableError | undefined;
  readonly #availabilityListeners: Array<(unavailable: StorageUnavailableError | undefined) => void> = [];
  #probing = false;
  readonly #closing = new AbortController();
  readonly #signals: PostgresSignals;

  private constructor(url: string, password: string, options: PostgresOptions) {
    this.#where = redactUrl(url);
    this.#password = password;
    this.#statementTimeoutMs = options.statementTimeoutMs;
    const pool = (max: number) => {
      const created = new pg.Pool({
        connectionString: url,
        max,
        statement_timeout: options.statementTimeoutMs,
        query_timeout: options.statementTimeoutMs + CLIENT_TIMEOUT_MARGIN_MS,
        connectionTimeoutMillis: options.statementTimeoutMs,
        keepAlive: true,
        application_name: 'strongroom',
        // Like the SQLite writer thread: an idle store never keeps the process alive.
        allowExitOnIdle: true,
      });
      // An idle connection the server closed (a restart, a failover) is reported here; unheard, it would end the process.
      created.on('error', () => this.#lost());
      return created;
    };
    this.#pool = pool(options.poolSize);
    this.#coordination = pool(COORDINATION_POOL_SIZE);
    this.#signals = new PostgresSignals(url, async (channel, payload) => void (await this.#query('strongroom_notify', 'SELECT pg_notify($1, $2)', [channel, payload])));
  }

  /**
   * Connects and brings the schema to this build's version. Throws StorageUnavailableError when PostgreSQL cannot
   * be reached; other errors (a refused login, a schema from a newer build) name their cause. Neither names the
   * password.
   */
  static async open(url: string, options: PostgresOptions = POSTGRES_DEFAULTS): Promise<PostgresStorage> {
    let password: string;
    try {
      const parsed = new URL(url);
      password = decodeURIComponent(parsed.password) || (parsed.searchParams.get('password') ?? '');
    } catch {
      throw new Error('the PostgreSQL storage URL is not a valid URL (postgres://user:password@host:port/database)');
    }
    const storage = new PostgresStorage(url, password, options);
    try {
      await migrate(storage.#pool);
    } catch (err) {
      await storage.close();
      throw storage.#explain(err);
    }
    return storage;
  }

  /**
   * Reads asked for in one turn of the event loop go to the database as one statement, after the turn: every request
   * reads its token (no node caches tokens, docs/ha.md), and a round trip per read cost more CPU in socket writes and
   * wake-ups than the rest of a read (measured: ~28% of a read's CPU was writev alone). One read alone keeps its own
   * statement.
   */
  get(key: string): Promise<Buffer | undefined> {
    if (this.#unavailable) return Promise.reject(this.#unavailable);
    return new Promise((resolve, reject) => {
      if (!this.#reads) {
        this.#reads = new Map();
        setImmediate(() => this.#readBatch());
      }
      const waiting = this.#reads.get(key);
      if (waiting) waiting.push({ resolve, reject });
      else this.#reads.set(key, [{ resolve, reject }]);
    });
  }

  #reads: Map<string, Array<{ resolve(value: Buffer | undefined): void; reject(err: unknown): void }>> | undefined;

  async #readBatch(): Promise<void> {
    const reads = this.#reads!;
    this.#reads = undefined;
    const keys = [...reads.keys()];
    try {
      const rows = keys.length === 1
        ? (await this.#query<{ key: string; value: Buffer }>('strongroom_get', 'SELECT key, value FROM strongroom_kv WHERE key = $1', keys)).rows
        : (await this.#query<{ key: string; value: Buffer }>('strongroom_get_many', 'SELECT key, value FROM strongroom_kv WHERE key = ANY ($1::text[])', [keys])).rows;
      const found = new Map(rows.map((r) => [r.key, r.value]));
      for (const [key, waiting] of reads) for (const w of waiting) w.resolve(found.get(key));
    } catch (err) {
      for (const waiting of reads.values()) for (const w of waiting) w.reject(err);
    }
  }

  async put(key: string, value: Buffer): Promise<void> {
    await this.transaction([{ type: 'put', key, value }]);
  }

  async delete(key: string): Promise<void> {
    await this.transaction([{ type: 'delete', key }]);
  }

  /**
   * When a batch ends inside a folder, the next one starts past that folder (its name with the '/' replaced by '0',
   * the next character), so a folder with a million keys costs one batch, and leaves and small folders are read in
   * bulk. `key + '\u0001'` is the first string after `key` (text cannot hold U+0000).
   */
  async list(prefix: string): Promise<string[]> {
    const end = prefixEnd(prefix);
    const keys: string[] = [];
    let from = prefix;
    for (;;) {
      const { rows } = end === undefined
        ? await this.#query<{ key: string }>('strongroom_list_all', OPEN_RANGE_SQL, [from])
        : await this.#query<{ key: string }>('strongroom_list', RANGE_SQL, [from, end]);
      for (const { key } of rows) keys.push(key);
      if (rows.length < LIST_BATCH) break;
      const last = rows[rows.length - 1].key;
      const slash = last.indexOf('/', prefix.length);
      from = slash === -1 ? `${last}\u0001` : `${last.slice(0, slash)}0`;
    }
    return directChildren(prefix, keys);
  }

  /**
   * Writes asked for in one turn of the event loop go to the database together, as one statement and one commit
   * (`strongroom_write_many`), like the SQLite store's group commit: under load a round trip and a commit per write
   * cost more than the writes. Each still lands whole or not at all under its own conditions. A write of more than
   * MAX_KEY_LOCKS keys goes alone, under the write gate.
   */
  transaction(ops: StorageOp[], conditions: StorageCondition[] = []): Promise<boolean> {
    if (this.#unavailable) return Promise.reject(this.#unavailable);
    const { puts, deletes, appends } = fold(ops);
    const write: Write = {
      locked: [...new Set([...puts.keys(), ...deletes, ...conditions.map((c) => c.key)])], conditions, puts, deletes, appends,
      tracked: deletes.some(this.#tracked) || [...puts.keys()].some(this.#tracked),
    };
    if (write.locked.length > MAX_KEY_LOCKS) return this.#writeAlone(write);
    return new Promise((resolve, reject) => {
      if (!this.#writes) {
        this.#writes = [];
        setImmediate(() => this.#writeTurn());
      }
      this.#writes.push({ write, resolve, reject });
    });
  }

  #writes: PendingWrite[] | undefined;

  /** The turn's writes in batches of at most MAX_KEY_LOCKS distinct keys, in the order they were asked for. */
  #writeTurn(): void {
    const pending = this.#writes!;
    this.#writes = undefined;
    let batch: PendingWrite[] = [];
    let keys = new Set<string>();
    for (const entry of pending) {
      const added = entry.write.locked.filter((k) => !keys.has(k)).length;
      if (batch.length > 0 && keys.size + added > MAX_KEY_LOCKS) {
        void this.#writeBatch(batch, keys);
        [batch, keys] = [[], new Set()];
      }
      batch.push(entry);
      for (const k of entry.write.locked) keys.add(k);
    }
    void this.#writeBatch(batch, keys);
  }

  async #writeBatch(batch: PendingWrite[], keys: Set<string>): Promise<void> {
    try {
      if (batch.length === 1) {
        batch[0].resolve(await this.#writeAlone(batch[0].write));
        return;
      }
      const writes = batch.map((b) => b.write);
      const { rows } = await this.#query<{ applied: boolean[] }>('strongroom_write_many', 'SELECT strongroom_write_many($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS applied', [
        [...keys],
        writes.map((w) => w.conditions.length),
        writes.flatMap((w) => w.conditions.map((c) => c.key)),
        writes.flatMap((w) => w.conditions.map((c) => c.expected ?? null)),
        writes.map((w) => w.puts.size),
        writes.flatMap((w) => [...w.puts.keys()]),
        writes.flatMap((w) => [...w.puts.values()]),
        writes.map((w) => w.deletes.length),
        writes.flatMap((w) => w.deletes),
        writes.some((w) => w.tracked),
        writes.map((w) => w.appends.length),
        writes.flatMap((w) => w.appends),
      ]);
      batch.forEach((b, i) => b.resolve(rows[0].applied[i]));
    } catch (err) {
      for (const b of batch) b.reject(err);
    }
  }

  async #writeAlone(write: Write): Promise<boolean> {
    const { rows } = await this.#query<{ applied: boolean }>('strongroom_write', 'SELECT strongroom_write($1, $2, $3, $4, $5, $6, $7, $8) AS applied', [
      write.locked,
      write.conditions.map((c) => c.key),
      write.conditions.map((c) => c.expected ?? null),
      [...write.puts.keys()],
      [...write.puts.values()],
      write.deletes,
      write.tracked,
      write.appends,
    ]);
    return rows[0].applied;
  }

  readonly log: EventLog = {
    read: async (after, limit) => {
      const { rows } = await this.#query<{ seq: string; at: number; value: Buffer }>('strongroom_log_read',
        'SELECT seq, extract(epoch FROM at) * 1000 AS at, value FROM strongroom_events WHERE seq > $1 ORDER BY seq LIMIT $2', [after, limit]);
      return rows.map((r): LogRecord => ({ seq: Number(r.seq), at: Number(r.at), value: r.value }));
    },
    trim: async (before, keep) => {
      const { rowCount } = await this.#query('strongroom_log_trim',
        'DELETE FROM strongroom_events WHERE at < to_timestamp($1 / 1000.0) OR seq <= (SELECT seq FROM strongroom_events ORDER BY seq DESC OFFSET $2 LIMIT 1)', [before, keep]);
      return rowCount ?? 0;
    },
    stats: async () => {
      const { rows } = await this.#query<{ count: string; last: string }>('strongroom_log_stats',
        'SELECT (SELECT count(*) FROM strongroom_events) AS count, (SELECT seq FROM strongroom_event_seq) AS last', []);
      return { count: Number(rows[0].count), last: Number(rows[0].last) };
    },
    head: async () => {
      const { rows } = await this.#query<{ seq: string }>('strongroom_log_head', 'SELECT seq FROM strongroom_event_seq', []);
      return Number(rows[0].seq);
    },
  };

  // ---- the cluster's coordination (SharedStorage) ------------------------------------------------

  /** Several nodes can share this store. */
  get shared(): SharedStorage {
    return this;
  }

  trackChanges(isTracked: (key: string) => boolean): void {
    this.#tracked = isTracked;
  }

  async changeVersion(): Promise<string> {
    const { rows } = await this.#query<{ version: string }>('strongroom_change_version', 'SELECT version FROM strongroom_changes', [], this.#coordination);
    return rows[0].version;
  }

  /**
   * Time is the database's (clock_timestamp), so the nodes' clocks never decide who leads. Only a lapsed lease is
   * taken, and taking it moves the term, which fences out whoever held it (docs/ha.md).
   */
  async acquireLeadership(node: string, ttlMs: number): Promise<number | undefined> {
    const { rows } = await this.#query<{ term: string }>('strongroom_lead',
      "UPDATE strongroom_leader SET term = term + 1, node = $1, valid_until = clock_timestamp() + $2 * interval '1 millisecond' WHERE valid_until < clock_timestamp() RETURNING term",
      [node, ttlMs], this.#coordination);
    return rows.length ? Number(rows[0].term) : undefined;
  }

  /** Only while it lasts: a lease that lapsed is anyone's, its former holder's included, under a new term. */
  async renewLeadership(node: string, term: number, ttlMs: number): Promise<boolean> {
    const { rowCount } = await this.#query('strongroom_renew',
      "UPDATE strongroom_leader SET valid_until = clock_timestamp() + $3 * interval '1 millisecond' WHERE node = $1 AND term = $2 AND valid_until >= clock_timestamp()",
      [node, term, ttlMs], this.#coordination);
    return rowCount === 1;
  }

  async releaseLeadership(node: string, term: number): Promise<void> {
    await this.#query('strongroom_release', "UPDATE strongroom_leader SET valid_until = '-infinity' WHERE node = $1 AND term = $2", [node, term], this.#coordination);
  }

  signal(payload: string): Promise<void> {
    return this.#signals.send(payload);
  }

  onSignal(listener: (payload: string) => void): () => void {
    return this.#signals.subscribe(listener);
  }

  onEventsCommitted(listener: () => void): () => void {
    return this.#signals.subscribe(() => listener(), EVENTS_CHANNEL);
  }

  // The database's own HA and restarts are passing states (`unavailable`); nothing here breaks for good.
  get failure(): Error | undefined {
    return undefined;
  }
  onFailure(): void {}

  get unavailable(): StorageUnavailableError | undefined {
    return this.#unavailable;
  }

  onAvailability(listener: (unavailable: StorageUnavailableError | undefined) => void): void {
    this.#availabilityListeners.push(listener);
  }

  async close(): Promise<void> {
    if (this.#closing.signal.aborted) return;
    this.#closing.abort();
    await Promise.all([this.#pool.end(), this.#coordination.end(), this.#signals.close()]);
  }

  async #query<R extends pg.QueryResultRow>(name: string, text: string, values: unknown[], pool = this.#pool): Promise<pg.QueryResult<R>> {
    // Refused at once while the database is away: a request should not wait out a connection timeout to learn it.
    if (this.#unavailable) throw this.#unavailable;
    try {
      return await pool.query<R>({ name, text, values });
    } catch (err) {
      throw this.#explain(err);
    }
  }

  /** Turns an error into the one callers see: a connection problem becomes StorageUnavailableError, and is probed. */
  #explain(err: unknown): Error {
    if (!(err instanceof Error)) return new Error(String(err));
    // The statement was cancelled, so it rolled back: nothing of it landed.
    if (err instanceof pg.DatabaseError && err.code === '57014') return new StorageUnavailableError(`PostgreSQL did not answer within ${this.#statementTimeoutMs / 1000}s`);
    if (!isConnectionLoss(err)) {
      if (err instanceof pg.DatabaseError) return new Error(`PostgreSQL at ${this.#where}: ${this.#scrub(err.message)}`);
      return err;
    }
    this.#lost();
    return new StorageUnavailableError(this.#reason(err));
  }

  #reason(err: Error): string {
    // Connecting to a name with several addresses fails with an AggregateError whose own message is empty.
    const detail = err.message || (err as { code?: string }).code || (err as Partial<AggregateError>).errors?.[0]?.message || 'connection failed';
    return `PostgreSQL at ${this.#where} cannot be reached (${this.#scrub(detail)})`;
  }

  /** Belt and braces: driver messages do not quote the password, and this makes sure none ever does. */
  #scrub(message: string): string {
    return this.#password ? message.split(this.#password).join('***') : message;
  }

  /**
   * A connection failed. One lost connection (a restarted backend) need not mean the database is gone, so the store
   * asks first: it becomes unavailable only when a probe fails, and available again at the first probe that
   * succeeds. Probes back off to PROBE_MAX_MS and stop when the store closes; they have no other end, since the
   * store must come back by itself however long the database is away.
   */
  #lost(): void {
    if (this.#probing || this.#closing.signal.aborted) return;
    this.#probing = true;
    void (async () => {
      for (let attempt = 0; !this.#closing.signal.aborted; attempt++) {
        const failed = await this.#probe();
        // A probe cut short by close() says nothing about the database.
        if (this.#closing.signal.aborted) break;
        this.#setUnavailable(failed && new StorageUnavailableError(this.#reason(failed)));
        if (!failed) break;
        await sleep(Math.min(PROBE_MAX_MS, PROBE_BASE_MS * 2 ** attempt), undefined, { signal: this.#closing.signal, ref: false }).catch(() => undefined);
      }
      this.#probing = false;
    })();
  }

  /** Undefined when the database answers and takes writes (a standby during a failover does not). */
  async #probe(): Promise<Error | undefined> {
    try {
      const { rows } = await this.#pool.query<{ standby: boolean }>('SELECT pg_is_in_recovery() AS standby');
      return rows[0].standby ? new Error('the server is a read-only standby') : undefined;
    } catch (err) {
      return err instanceof Error ? err : new Error(String(err));
    }
  }

  /** Listeners hear the changes between available and not; a probe failing again only refreshes the reason. */
  #setUnavailable(next: StorageUnavailableError | undefined): void {
    const changed = !next !== !this.#unavailable;
    this.#unavailable = next;
    if (changed) for (const listener of this.#availabilityListeners) listener(next);
  }

}

/**
 * The first string after every string that starts with `prefix`, in code point order (PostgreSQL's "C" order of UTF-8
 * text), or undefined for the empty prefix. Surrogates are skipped: no text holds them.
 */
function prefixEnd(prefix: string): string | undefined {
  const points = [...prefix];
  while (points.length > 0) {
    const last = points.pop()!.codePointAt(0)!;
    if (last < 0x10ffff) return points.join('') + String.fromCodePoint(last === 0xd7ff ? 0xe000 : last + 1);
  }
  return undefined;
}

/** One write as `strongroom_write` takes it: the keys it locks, its guards, and the final state of each key it writes. */
interface Write {
  locked: string[];
  conditions: StorageCondition[];
  puts: Map<string, Buffer>;
  deletes: string[];
  appends: Buffer[];
  tracked: boolean;
}

interface PendingWrite {
  write: Write;
  resolve(applied: boolean): void;
  reject(err: unknown): void;
}

/** The final state per key of a list of operations applied in order. */
function fold(ops: StorageOp[]): { puts: Map<string, Buffer>; deletes: string[]; appends: Buffer[] } {
  const last = new Map<string, Buffer | null>();
  const appends: Buffer[] = [];
  for (const op of ops) {
    if (op.type === 'append') appends.push(op.value);
    else last.set(op.key, op.type === 'put' ? op.value : null);
  }
  const puts = new Map<string, Buffer>();
  const deletes: string[] = [];
  for (const [key, value] of last) {
    if (value === null) deletes.push(key);
    else puts.set(key, value);
  }
  return { puts, deletes, appends };
}

/**
 * Errors that say the connection (not the statement) failed: socket errors, the driver's own timeouts and closed
 * connections, and PostgreSQL's connection, shutdown, resource and read-only classes (a standby after a failover).
 */
function isConnectionLoss(err: Error): boolean {
  const code = (err as { code?: unknown }).code;
  if (err instanceof pg.DatabaseError) return /^(08|53|57P)/.test(code as string) || code === '25006';
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return true;
  if (err instanceof AggregateError) return true;
  return /connection terminated|connection error|not queryable|timeout exceeded when trying to connect|query read timeout/i.test(err.message);
}

/** The URL with its password (in the user part or a `password` parameter) replaced by `***`, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    if (parsed.searchParams.has('password')) parsed.searchParams.set('password', '***');
    return parsed.href;
  } catch {
    return url.replace(/\/\/([^:/@]*):[^@]*@/, '//$1:***@');
  }
}
