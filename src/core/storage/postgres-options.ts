/**
 * The PostgreSQL store's settings and defaults, apart from the store itself so that settings and the server can name
 * them without loading `pg` (and the store's code) on a start that uses SQLite or memory storage.
 */
export interface PostgresOptions {
  /** Connections this process keeps to the database at most. */
  poolSize: number;
  /** The longest one statement may run before PostgreSQL cancels it (and rolls it back), in milliseconds. */
  statementTimeoutMs: number;
}

export const POSTGRES_DEFAULTS: PostgresOptions = { poolSize: 10, statementTimeoutMs: 10_000 };
