import type pg from 'pg';

/**
 * Advisory locks live in one namespace per database, shared with whatever else uses it. Ours are the two-integer
 * form under this class (key hashes use the one-bigint form, a separate namespace), so they cannot meet another
 * application's unless it picks the same class.
 */
const LOCK_CLASS = 0x5352_4d31; // "SRM1"
const SCHEMA_LOCK = 1;
const WRITE_GATE = 2;

/**
 * A transaction locks each key it touches while it writes fewer than this many; a larger one (a remount moving
 * thousands of leases) takes the write gate alone instead. Advisory locks come out of PostgreSQL's shared lock
 * table (max_locks_per_transaction x max_connections, 6400 slots by default), which one large transaction per key
 * would exhaust for the whole server.
 */
export const MAX_KEY_LOCKS = 32;

/**
 * How every write is serialised: `strongroom_write` runs in one PostgreSQL transaction (one statement, so one round
 * trip) and, before it reads a condition or writes a key, takes a transaction-scoped advisory lock on the hash of
 * every key the transaction names, conditions and operations alike, in hash order (no deadlock), behind a shared
 * lock on the write gate that a large transaction takes exclusively. So every write to a key holds that key's lock
 * until it commits, and a condition is read under it, after the previous holder's commit is visible (READ
 * COMMITTED: each statement of a volatile function takes a fresh snapshot).
 *
 * Why not the alternatives: a row lock (SELECT ... FOR UPDATE) cannot lock a row that does not exist, and most
 * guards here expect a key absent ("no lease yet", "not being revoked"); SERIALIZABLE guards absent keys with
 * predicate locks, but aborts unrelated transactions that share an index page and needs a retry loop around every
 * write; an INSERT ... ON CONFLICT placeholder covers an absent key but writes (and leaves dead) a row for every
 * guard. Two keys whose hashes collide merely wait for each other. The server side keeps each lock held for the
 * commit alone, not for a client's round trips, which matters once several nodes write the same hot keys.
 *
 * The last operation on a key wins, as if the operations were applied in order (`fold` in postgres.ts).
 *
 * From schema version 2 a write that names a key the nodes cache (`tracked`, decided by the caller's predicate) also
 * moves the change version, in the same transaction; writes of uncached keys (tokens, leases) leave it alone, so the
 * single row is locked only by the rare writes of mounts, policies, configs and the keyring.
 */
function writeFunction(tracking: boolean, appending = false): string {
  return `
CREATE FUNCTION strongroom_write(lock_keys text[], cond_keys text[], cond_values bytea[], put_keys text[], put_values bytea[], delete_keys text[]${tracking ? ', tracked boolean' : ''}${appending ? ', append_values bytea[]' : ''})
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
${appending ? 'DECLARE\n  last_seq bigint;\n' : ''}BEGIN
  -- An acknowledged write must survive a crash: a session or role that turned commits asynchronous gets them back.
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  IF cardinality(lock_keys) > ${MAX_KEY_LOCKS} THEN
    PERFORM pg_advisory_xact_lock(${LOCK_CLASS}, ${WRITE_GATE});
  ELSE
    PERFORM pg_advisory_xact_lock_shared(${LOCK_CLASS}, ${WRITE_GATE});
    PERFORM pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(lock_keys) AS k ORDER BY h) AS ordered;
  END IF;
  IF EXISTS (
    SELECT FROM unnest(cond_keys, cond_values) AS c (key, expected)
    LEFT JOIN strongroom_kv AS kv ON kv.key = c.key
    WHERE kv.value IS DISTINCT FROM c.expected
  ) THEN
    RETURN false;
  END IF;
  DELETE FROM strongroom_kv WHERE key = ANY (delete_keys);
  INSERT INTO strongroom_kv (key, value) SELECT * FROM unnest(put_keys, put_values)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value;${appending ? appendStatements('append_values') : ''}${tracking ? `
  -- Committed with the change it counts: a node that reads the new version reads the change too.
  IF tracked THEN
    UPDATE strongroom_changes SET version = version + 1;
  END IF;` : ''}
  RETURN true;
END
$$`;
}

/**
 * Several writes in one transaction, in order, each with its own conditions (so each lands whole or not at all, and
 * sees the ones before it), one commit for all: the writes of one event-loop turn (`PostgresStorage.transaction`). Each write's
 * keys are found in the flat arrays by its counts. Every key of every write is locked first, in hash order, so two
 * batches never deadlock; a batch names at most MAX_KEY_LOCKS keys, so it never needs the write gate.
 */
function writeManyFunction(appending: boolean): string {
  return `
CREATE FUNCTION strongroom_write_many(lock_keys text[], cond_counts integer[], cond_keys text[], cond_values bytea[], put_counts integer[], put_keys text[], put_values bytea[], delete_counts integer[], delete_keys text[], tracked boolean${appending ? ', append_counts integer[], append_values bytea[]' : ''})
RETURNS boolean[] LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  applied boolean[] := '{}';
  c integer := 1;
  p integer := 1;
  d integer := 1;${appending ? '\n  a integer := 1;\n  last_seq bigint;' : ''}
BEGIN
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'on', true);
  END IF;
  PERFORM pg_advisory_xact_lock_shared(${LOCK_CLASS}, ${WRITE_GATE});
  PERFORM pg_advisory_xact_lock(h) FROM (SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest(lock_keys) AS k ORDER BY h) AS ordered;
  FOR i IN 1 .. cardinality(cond_counts) LOOP
    IF EXISTS (
      SELECT FROM unnest(cond_keys[c : c + cond_counts[i] - 1], cond_values[c : c + cond_counts[i] - 1]) AS x (key, expected)
      LEFT JOIN strongroom_kv AS kv ON kv.key = x.key
      WHERE kv.value IS DISTINCT FROM x.expected
    ) THEN
      applied := applied || false;
    ELSE
      DELETE FROM strongroom_kv WHERE key = ANY (delete_keys[d : d + delete_counts[i] - 1]);
      INSERT INTO strongroom_kv (key, value) SELECT * FROM unnest(put_keys[p : p + put_counts[i] - 1], put_values[p : p + put_counts[i] - 1])
        ON CONFLICT (key) DO UPDATE SET value = excluded.value;${appending ? appendStatements('append_values[a : a + append_counts[i] - 1]') : ''}
      applied := applied || true;
    END IF;
    c := c + cond_counts[i];
    p := p + put_counts[i];
    d := d + delete_counts[i];${appending ? '\n    a := a + append_counts[i];' : ''}
  END LOOP;
  IF tracked THEN
    UPDATE strongroom_changes SET version = version + 1;
  END IF;
  RETURN applied;
END
$$`;
}

/**
 * The event log's appends (docs/events.md): the counter row stays locked from this update until the transaction
 * commits, so transactions that append commit in the order of their sequences, and a reader that has seen sequence n
 * will never see a smaller one appear later. The notification wakes the nodes' readers (sent at commit, or not at all).
 */
function appendStatements(values: string): string {
  return `
  IF cardinality(${values}) > 0 THEN
    UPDATE strongroom_event_seq SET seq = seq + cardinality(${values}) RETURNING seq INTO last_seq;
    INSERT INTO strongroom_events (seq, value) SELECT last_seq - cardinality(${values}) + o, v FROM unnest(${values}) WITH ORDINALITY AS x (v, o);
    PERFORM pg_notify('strongroom_events', last_seq::text);
  END IF;`;
}

/**
 * Schema versions in order: entry i upgrades version i to i + 1. Released entries are never edited, only appended
 * to. Keys sort in byte order (COLLATE "C", whatever the database's collation), so a prefix is one range of the
 * primary key's index and listing a folder never sorts or scans past it.
 */
const SCHEMA_STEPS: string[] = [
  `CREATE TABLE strongroom_kv (key text COLLATE "C" PRIMARY KEY, value bytea NOT NULL);
   ${writeFunction(false)};`,
  // The cluster (docs/ha.md): a change version that writes of cached keys move, and the leader lease. Both tables
  // hold one row, so neither ever needs a lookup by key.
  `CREATE TABLE strongroom_changes (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version bigint NOT NULL);
   INSERT INTO strongroom_changes (version) VALUES (0);
   CREATE TABLE strongroom_leader (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), term bigint NOT NULL, node text NOT NULL, valid_until timestamptz NOT NULL);
   INSERT INTO strongroom_leader (term, node, valid_until) VALUES (0, '', '-infinity');
   DROP FUNCTION strongroom_write(text[], text[], bytea[], text[], bytea[], text[]);
   ${writeFunction(true)};`,
  writeManyFunction(false),
  // The event log (docs/events.md): records numbered by a counter row that orders their commits.
  `CREATE TABLE strongroom_events (seq bigint PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(), value bytea NOT NULL);
   CREATE INDEX strongroom_events_at ON strongroom_events (at);
   CREATE TABLE strongroom_event_seq (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), seq bigint NOT NULL);
   INSERT INTO strongroom_event_seq (seq) VALUES (0);
   DROP FUNCTION strongroom_write(text[], text[], bytea[], text[], bytea[], text[], boolean);
   DROP FUNCTION strongroom_write_many(text[], integer[], text[], bytea[], integer[], text[], bytea[], integer[], text[], boolean);
   ${writeFunction(true, true)};
   ${writeManyFunction(true)};`,
];

/**
 * Creates or upgrades the schema in one transaction under a fixed advisory lock, so nodes starting together on
 * an empty database create it once and the others wait, then find it current.
 */
export async function migrate(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  let failed: Error | undefined;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock($1, $2)', [LOCK_CLASS, SCHEMA_LOCK]);
    const { rows: [{ present }] } = await client.query<{ present: boolean }>("SELECT to_regclass('strongroom_schema') IS NOT NULL AS present");
    let version = 0;
    if (present) version = (await client.query<{ version: number }>('SELECT version FROM strongroom_schema')).rows[0]?.version ?? 0;
    else await client.query('CREATE TABLE strongroom_schema (only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), version integer NOT NULL)');
    if (version > SCHEMA_STEPS.length) throw new Error(`the database holds schema version ${version}, newer than this build's ${SCHEMA_STEPS.length}: run a Strongroom at least as new as the one that upgraded it`);
    if (version < SCHEMA_STEPS.length) {
      for (const step of SCHEMA_STEPS.slice(version)) await client.query(step);
      await client.query('INSERT INTO strongroom_schema (version) VALUES ($1) ON CONFLICT (only_row) DO UPDATE SET version = excluded.version', [SCHEMA_STEPS.length]);
    }
    await client.query('COMMIT');
  } catch (err) {
    failed = err as Error;
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    // A connection that failed mid-transaction is not handed back to the pool.
    client.release(failed);
  }
}
