// PostgreSQL storage beyond the shared contract (storage-contract.test.ts): several pools on one database, the
// schema made at start, and the database going away and coming back.
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { promisify } from 'node:util';
import pg from 'pg';
import type { PostgresOptions } from '../../src/core/storage/postgres-options.ts';
import { PostgresStorage, RANGE_SQL } from '../../src/core/storage/postgres.ts';
import { StorageUnavailableError, type StorageOp } from '../../src/core/storage/types.ts';
import { StartupError } from '../../src/server.ts';
import { freePort } from '../support/ports.ts';
import { createDatabase, startPostgres, startServer, stopPostgres, stopServer, type PostgresFacts, type TestDatabase } from '../support/postgres.ts';
import { startTestServer, type TestServer } from '../support/server.ts';

const shared = inject('postgres');
const b = (s: string) => Buffer.from(s);
const text = (v: Buffer | undefined) => v?.toString();

const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

async function database(facts: Pick<PostgresFacts, 'adminUrl' | 'host' | 'port' | 'user'> = shared): Promise<TestDatabase> {
  const db = await createDatabase(facts);
  closers.push(() => db.drop());
  return db;
}

/** A store as one node opens it; closed before its database is dropped. */
async function node(url: string, options?: PostgresOptions): Promise<PostgresStorage> {
  const s = await PostgresStorage.open(url, options);
  closers.push(() => s.close());
  return s;
}

/** Runs `sql` on its own connection, as an operator (or another application) would. */
async function psql<R extends pg.QueryResultRow>(url: string, sql: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(sql, values)).rows;
  } finally {
    await client.end();
  }
}

describe('compare-and-set across nodes (two pools on one database)', () => {
  it('"of transactions from two nodes that all expect one key absent, exactly one wins"', async () => {
    const db = await database();
    const [a, c] = [await node(db.url), await node(db.url)];
    for (let round = 0; round < 20; round++) {
      const key = `claim/${round}`;
      const results = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? a : c).transaction([{ type: 'put', key, value: b(String(i)) }], [{ key, expected: undefined }])));
      expect(results.filter(Boolean), `round ${round}`).toHaveLength(1);
      expect(text(await a.get(key))).toBe(String(results.indexOf(true)));
    }
  });

  it('"two nodes incrementing one counter by compare-and-set lose no update"', async () => {
    const db = await database();
    const [a, c] = [await node(db.url), await node(db.url)];
    await a.put('counter', b('0'));
    const increment = async (s: PostgresStorage) => {
      for (let attempt = 0; attempt < 200; attempt++) {
        const current = await s.get('counter');
        if (await s.transaction([{ type: 'put', key: 'counter', value: b(String(Number(text(current)) + 1)) }], [{ key: 'counter', expected: current }])) return;
      }
      throw new Error('no attempt won');
    };
    await Promise.all(Array.from({ length: 30 }, (_, i) => increment(i % 2 ? a : c)));
    expect(text(await c.get('counter'))).toBe('30');
  });

  it('"a plain put racing a compare-and-set that expects the key absent always ends with the put\'s value: it cannot land between the check and the write"', async () => {
    const db = await database();
    const [a, c] = [await node(db.url), await node(db.url)];
    for (let round = 0; round < 40; round++) {
      const key = `race/${round}`;
      await Promise.all([
        a.transaction([{ type: 'put', key, value: b('guarded') }], [{ key, expected: undefined }]),
        c.put(key, b('plain')),
      ]);
      expect(text(await a.get(key)), `round ${round}`).toBe('plain');
    }
  });

  it('"writes asked for in one turn land together in order, each whole or not at all under its own conditions, the later ones seeing the earlier"', async () => {
    const db = await database();
    const s = await node(db.url);
    const results = await Promise.all([
      s.transaction([{ type: 'put', key: 'turn/a', value: b('1') }], [{ key: 'turn/a', expected: undefined }]),
      s.transaction([{ type: 'put', key: 'turn/a', value: b('2') }, { type: 'put', key: 'turn/b', value: b('x') }], [{ key: 'turn/a', expected: b('1') }]),
      s.transaction([{ type: 'put', key: 'turn/a', value: b('3') }, { type: 'put', key: 'turn/c', value: b('y') }], [{ key: 'turn/a', expected: undefined }]),
      s.transaction([{ type: 'delete', key: 'turn/b' }]),
    ]);
    expect(results).toEqual([true, true, false, true]);
    expect([text(await s.get('turn/a')), await s.get('turn/b'), await s.get('turn/c')]).toEqual(['2', undefined, undefined]);
  });

  it('"a transaction naming more keys than the per-key lock limit takes the write gate and is serialised with small ones"', async () => {
    const db = await database();
    const [a, c] = [await node(db.url), await node(db.url)];
    await a.put('counter', b('0'));
    const bump = async (s: PostgresStorage, extra: number, tag: string) => {
      for (let attempt = 0; attempt < 200; attempt++) {
        const current = await s.get('counter');
        const ops: StorageOp[] = [{ type: 'put', key: 'counter', value: b(String(Number(text(current)) + 1)) }];
        for (let i = 0; i < extra; i++) ops.push({ type: 'put', key: `bulk/${tag}/${i}`, value: b('x') });
        if (await s.transaction(ops, [{ key: 'counter', expected: current }])) return;
      }
      throw new Error('no attempt won');
    };
    await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? bump(a, 100, String(i)) : bump(c, 0, String(i)))));
    expect(text(await a.get('counter'))).toBe('20');
    expect(await a.list('bulk/')).toHaveLength(10);
  });

  it('"a write waits for another session holding its key\'s lock, and past the statement timeout is answered as unavailable with nothing written"', async () => {
    const db = await database();
    const s = await node(db.url, { poolSize: 2, statementTimeoutMs: 1000 });
    const holder = new pg.Client({ connectionString: db.url });
    await holder.connect();
    closers.push(() => holder.end());
    await holder.query('BEGIN');
    await holder.query("SELECT pg_advisory_xact_lock(hashtextextended('held', 0))");
    const started = performance.now();
    await expect(s.put('held', b('v'))).rejects.toThrow(/storage is unavailable: PostgreSQL did not answer within 1s/);
    expect(performance.now() - started).toBeGreaterThanOrEqual(900);
    // One slow statement says nothing about the database: the store stays available.
    expect(s.unavailable).toBeUndefined();
    await holder.query('COMMIT');
    expect(await s.get('held')).toBeUndefined();
  });
});

describe('what the nodes of a cluster coordinate through (SharedStorage)', () => {
  it('"a write naming a tracked key moves the change version with it; other writes and a refused compare-and-set do not"', async () => {
    const db = await database();
    const [a, c] = [await node(db.url), await node(db.url)];
    a.trackChanges((key) => key.startsWith('cached/'));
    const start = await c.changeVersion();
    await a.put('plain', b('x'));
    expect(await c.changeVersion()).toBe(start);
    await a.transaction([{ type: 'put', key: 'plain/2', value: b('y') }, { type: 'delete', key: 'cached/gone' }]);
    const moved = await c.changeVersion();
    expect(BigInt(moved)).toBe(BigInt(start) + 1n);
    expect(await a.transaction([{ type: 'put', key: 'cached/x', value: b('z') }], [{ key: 'plain', expected: b('not this') }])).toBe(false);
    expect(await c.changeVersion()).toBe(moved);
    // The predicate is the writer's: a node that tracks nothing moves nothing.
    await c.put('cached/y', b('w'));
    expect(await a.changeVersion()).toBe(moved);
  });

  it('"of nodes asking for the leader lease at once one gets it, with the next term; only its holder renews it, while it lasts; a lapsed or released lease goes to the next with the term after"', async () => {
    const db = await database();
    const nodes = await Promise.all(Array.from({ length: 4 }, () => node(db.url)));
    const terms = await Promise.all(nodes.map((n, i) => n.acquireLeadership(`node-${i}`, 400)));
    expect(terms.filter((t) => t !== undefined)).toEqual([1]);
    const holder = terms.indexOf(1);
    const other = (holder + 1) % 4;
    expect(await nodes[other].renewLeadership(`node-${other}`, 1, 400)).toBe(false);
    expect(await nodes[holder].renewLeadership(`node-${holder}`, 1, 400)).toBe(true);
    expect(await nodes[other].acquireLeadership(`node-${other}`, 400)).toBeUndefined();
    // Lapsed: the database's clock says so, whatever the nodes' clocks say; its holder cannot renew it any more.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await nodes[holder].renewLeadership(`node-${holder}`, 1, 400)).toBe(false);
    expect(await nodes[other].acquireLeadership(`node-${other}`, 400)).toBe(2);
    await nodes[other].releaseLeadership(`node-${other}`, 2);
    expect(await nodes[holder].acquireLeadership(`node-${holder}`, 400)).toBe(3);
  });
});

describe('the schema, made at start under a lock', () => {
  it('"four nodes starting together on an empty database make one schema, without error"', async () => {
    const db = await database();
    const nodes = await Promise.all(Array.from({ length: 4 }, () => node(db.url)));
    expect(await psql(db.url, 'SELECT version FROM strongroom_schema')).toEqual([{ version: 4 }]);
    expect(await psql(db.url, "SELECT proname FROM pg_proc WHERE proname = 'strongroom_write'")).toHaveLength(1);
    await nodes[0].put('seen/by', b('all'));
    for (const n of nodes) expect(text(await n.get('seen/by'))).toBe('all');
  });

  it('"a node started again finds the schema current and keeps the data"', async () => {
    const db = await database();
    const first = await node(db.url);
    await first.put('kept', b('1'));
    await first.close();
    const again = await node(db.url);
    expect(text(await again.get('kept'))).toBe('1');
    expect(await psql(db.url, 'SELECT version FROM strongroom_schema')).toEqual([{ version: 4 }]);
  });

  it('"a schema newer than this build is refused at start, naming both versions"', async () => {
    const db = await database();
    await (await PostgresStorage.open(db.url)).close();
    await psql(db.url, 'UPDATE strongroom_schema SET version = 99');
    await expect(PostgresStorage.open(db.url)).rejects.toThrow(/schema version 99, newer than this build's 4/);
    await expect(startTestServer({ postgresUrl: db.url })).rejects.toBeInstanceOf(StartupError);
  });
});

describe('listing a folder', () => {
  it('"a batch reads one range of the primary key\'s index, bounded on both sides: no table scan, no sort"', async () => {
    const db = await database();
    const s = await node(db.url);
    for (const folder of ['sys/expire/', 'sys/token/', 'sys/policy/', 'ldap/']) {
      for (let i = 0; i < 2000; i += 500) await s.transaction(Array.from({ length: 500 }, (_, j) => ({ type: 'put' as const, key: `${folder}${(i + j) % 7}/${i + j}`, value: b('x') })));
    }
    await psql(db.url, 'ANALYZE strongroom_kv');
    const plan = (await psql<{ 'QUERY PLAN': string }>(db.url, `EXPLAIN (COSTS OFF) ${RANGE_SQL.replace('$1', "'sys/token/'").replace('$2', "'sys/token0'")}`)).map((r) => r['QUERY PLAN']).join('\n');
    expect(plan).toMatch(/Index Only Scan using strongroom_kv_pkey on strongroom_kv\n\s+Index Cond: \(\(key >= 'sys\/token\/'::text\) AND \(key < 'sys\/token0'::text\)\)/);
    expect(plan).not.toMatch(/Seq Scan|Sort/);
  });
});

describe('starting without the database', () => {
  it('"a server that cannot reach PostgreSQL at start exits with code 5, and its message masks the URL\'s password"', async () => {
    const password = `pw-${randomBytes(6).toString('hex')}`;
    const url = `postgres://strongroom:${password}@127.0.0.1:${await freePort()}/nowhere`;
    const run = promisify(execFile)(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/main.ts'], {
      env: { ...process.env, STRONGROOM_STORAGE: url, STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64'), STRONGROOM_ADDR: '127.0.0.1:0' },
    });
    const err = await run.then(() => undefined, (e: { code: number; stderr: string; stdout: string }) => e);
    expect(err?.code).toBe(5);
    expect(err?.stderr).toMatch(/storage is unavailable: PostgreSQL at postgres:\/\/strongroom:\*\*\*@127\.0\.0\.1:\d+\/nowhere cannot be reached \(.*ECONNREFUSED.*\)\. Start again once the database is reachable\./);
    expect(`${err?.stderr}${err?.stdout}`).not.toContain(password);
  });

  it('"a database that refuses the login, or does not exist, is a setting to fix (StartupError), not an outage"', async () => {
    await expect(startTestServer({ postgresUrl: `postgres://strongroom@127.0.0.1:${shared.port}/no_such_database` })).rejects.toThrow(/cannot open the PostgreSQL storage: PostgreSQL at .*: database "no_such_database" does not exist/);
  });

  it('"PostgreSQL storage without an unseal key is refused: a generated key would be lost"', async () => {
    const db = await database();
    await expect(startTestServer({ postgresUrl: db.url, env: { STRONGROOM_UNSEAL_KEY: '' } })).rejects.toThrow(/needs STRONGROOM_UNSEAL_KEY or STRONGROOM_UNSEAL_KEY_FILE/);
  });
});

describe('losing the database while running (a server of this file\'s own, stopped and started)', () => {
  let own: PostgresFacts;
  beforeAll(async () => {
    own = await startPostgres();
  });
  afterAll(async () => {
    await stopPostgres(own);
  });
  /** Whatever a test did, the next one finds the server running. */
  afterEach(async () => {
    await startServer(own).catch(() => undefined);
  });

  it('"a lost database makes the store unavailable: calls are refused with StorageUnavailableError, listeners hear it, and it comes back by itself"', async () => {
    const db = await database(own);
    const s = await node(db.url);
    const heard: Array<string | undefined> = [];
    s.onAvailability((lost) => heard.push(lost?.message));
    await s.put('before', b('1'));

    await stopServer(own, 'fast');
    await expect(s.get('before')).rejects.toBeInstanceOf(StorageUnavailableError);
    await expect.poll(() => s.unavailable).toBeInstanceOf(StorageUnavailableError);
    await expect(s.put('during', b('x'))).rejects.toThrow(/^storage is unavailable: PostgreSQL at postgres:\/\/.* cannot be reached/);
    expect(heard).toEqual([expect.stringMatching(/^storage is unavailable: /)]);

    await startServer(own);
    await expect.poll(() => s.unavailable, { timeout: 5000 }).toBeUndefined();
    expect(heard).toEqual([expect.any(String), undefined]);
    expect(text(await s.get('before'))).toBe('1');
    expect(await s.get('during')).toBeUndefined();
  });

  it('"a write acknowledged before a crash is there after the restart; one under way landed whole or not at all"', async () => {
    const db = await database(own);
    const s = await node(db.url);
    const acknowledged = new Set<string>();
    const writes = Array.from({ length: 3000 }, (_, i) => s
      .transaction(Array.from({ length: 10 }, (_, j) => ({ type: 'put' as const, key: `t/${i}/${j}`, value: b(`${i}.${j}`) })))
      .then(() => void acknowledged.add(String(i)), () => undefined));
    await expect.poll(() => acknowledged.size, { interval: 1 }).toBeGreaterThanOrEqual(20);
    await stopServer(own, 'immediate');
    await Promise.all(writes);
    expect(acknowledged.size).toBeLessThan(3000);

    await startServer(own);
    const landed = await psql<{ t: string; keys: number }>(db.url, "SELECT split_part(key, '/', 2) AS t, count(*)::int AS keys FROM strongroom_kv WHERE key LIKE 't/%' GROUP BY 1");
    expect(landed.filter((row) => row.keys !== 10)).toEqual([]);
    const landedIds = new Set(landed.map((row) => row.t));
    expect([...acknowledged].filter((i) => !landedIds.has(i))).toEqual([]);
  });

  it('"the server process logs the loss and the return, masks the URL\'s password, and keeps running"', async () => {
    const db = await database(own);
    const password = `pw-${randomBytes(6).toString('hex')}`;
    const port = await freePort();
    const child = spawn(process.execPath, ['--disable-warning=ExperimentalWarning', 'src/main.ts'], {
      env: { ...process.env, STRONGROOM_STORAGE: db.url.replace('://strongroom@', `://strongroom:${password}@`), STRONGROOM_UNSEAL_KEY: randomBytes(32).toString('base64'), STRONGROOM_ADDR: `127.0.0.1:${port}`, STRONGROOM_LOG_LEVEL: 'info' },
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const exited = new Promise((resolve) => child.once('exit', resolve));
    closers.push(async () => {
      child.kill('SIGTERM');
      await exited;
    });
    await expect.poll(() => out, { timeout: 15_000 }).toMatch(/strongroom listening/);
    const health = async () => (await fetch(`http://127.0.0.1:${port}/v1/sys/health`)).status;
    expect(await health()).toBe(200);

    // The server's idle connections are closed by the shutdown: that alone is noticed, no request needed.
    await stopServer(own, 'fast');
    await expect.poll(() => out).toMatch(/"level":50,.*"reason":"storage is unavailable: PostgreSQL at postgres:\/\/strongroom:\*\*\*@127\.0\.0\.1:\d+\/\w+ cannot be reached.*"msg":"storage unreachable: requests that need it get 503 until it is back"/);
    expect(await health()).toBe(503);
    await startServer(own);
    await expect.poll(() => out, { timeout: 5000 }).toMatch(/"level":30,.*"msg":"storage reachable again"/);
    expect(await health()).toBe(200);
    expect(child.exitCode).toBeNull();
    expect(out).not.toContain(password);
  });

  it('"requests get 503 and sys/health 503 while the database is away; the server answers again by itself once it is back"', async () => {
    const db = await database(own);
    const server: TestServer = await startTestServer({ postgresUrl: db.url });
    closers.push(() => server.close());
    await server.request('PUT', 'sys/policies/acl/kept', { body: { policy: 'path "secret/*" { capabilities = ["read"] }' } });

    await stopServer(own, 'fast');
    const during = await server.request('GET', 'sys/policies/acl/kept');
    expect(during.status).toBe(503);
    expect(during.body.errors).toEqual([expect.stringMatching(/^storage is unavailable: PostgreSQL at .* cannot be reached/)]);
    await expect.poll(async () => (await server.request('GET', 'sys/health', { token: null })).status).toBe(503);
    expect((await server.request('GET', 'sys/health', { token: null })).body).toMatchObject({ initialized: true, sealed: false, standby: false });
    expect((await server.request('GET', 'sys/policies/acl/kept')).status).toBe(503);

    await startServer(own);
    await expect.poll(async () => (await server.request('GET', 'sys/health', { token: null })).status, { timeout: 5000 }).toBe(200);
    const after = await server.request('GET', 'sys/policies/acl/kept');
    expect(after.status).toBe(200);
    expect(after.body.data.policy).toContain('secret/*');
  });
});
