// The server on PostgreSQL storage: the paths storage-restart.test.ts walks on SQLite, and two servers on one database.
import { afterEach, describe, expect, inject, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { createDatabase } from '../support/postgres.ts';
import { startTestServer, type TestServer } from '../support/server.ts';
import { testBackend, type TestBackendProbe } from '../support/test-backend.ts';

const postgres = inject('postgres');
const backends = { secret: { test: testBackend(new Map<string, TestBackendProbe>()) }, auth: {} };
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!();
});

async function database(): Promise<string> {
  const db = await createDatabase(postgres);
  closers.push(() => db.drop());
  return db.url;
}

async function server(postgresUrl: string, unsealKey: string): Promise<TestServer> {
  const s = await startTestServer({ postgresUrl, unsealKey, backends });
  closers.push(() => s.close());
  return s;
}

describe('a server on PostgreSQL storage', () => {
  it('"mounts, stored objects, policies, tokens and leases work, and a restart with the same unseal key keeps them"', async () => {
    const [url, key] = [await database(), randomBytes(32).toString('base64')];
    // Closed by the test itself, to start again on the same database.
    const first = await startTestServer({ postgresUrl: url, unsealKey: key, backends });
    expect((await first.request('GET', 'sys/seal-status', { token: null })).body.storage_type).toBe('postgresql');
    await first.request('POST', 'sys/mounts/kept', { body: { type: 'test' } });
    await first.request('POST', 'kept/data/item', { body: { value: 'still here' } });
    await first.request('POST', 'kept/data/folder/inner', { body: { value: 'nested' } });
    await first.request('PUT', 'sys/policies/acl/kept', { body: { policy: 'path "kept/*" { capabilities = ["read", "list"] }' } });
    const token = (await first.request('POST', 'auth/token/create', { body: { policies: ['kept'] } })).body.auth.client_token;
    const { lease_id } = (await first.request('GET', 'kept/creds/c')).body;
    expect((await first.request('LIST', 'kept/data/', { token })).body.data.keys).toEqual(['folder/', 'item']);
    await first.close();

    const second = await server(url, key);
    expect((await second.request('GET', 'kept/data/item', { token })).body.data.value).toBe('still here');
    expect((await second.request('GET', 'sys/mounts')).body.data['kept/'].type).toBe('test');
    expect((await second.request('PUT', 'sys/leases/lookup', { body: { lease_id } })).body.data.id).toBe(lease_id);
    expect((await second.request('GET', 'sys/mounts', { token })).status).toBe(403);
    expect((await second.request('GET', 'sys/health', { token: null })).status).toBe(200);
  });

  it('"a wrong unseal key refuses to start"', async () => {
    const url = await database();
    await server(url, randomBytes(32).toString('base64'));
    await expect(startTestServer({ postgresUrl: url, unsealKey: randomBytes(32).toString('base64'), backends })).rejects.toThrow(/unseal key does not open this store/);
  });

  it('"no plaintext secret or token is stored in the database"', async () => {
    const url = await database();
    const s = await server(url, randomBytes(32).toString('base64'));
    const marker = `needle-${randomBytes(8).toString('hex')}`;
    await s.request('POST', 'sys/mounts/plain', { body: { type: 'test' } });
    await s.request('POST', 'plain/data/x', { body: { value: marker } });
    const token = (await s.request('POST', 'auth/token/create', { body: {} })).body.auth.client_token as string;
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const { rows } = await client.query<{ key: string; value: Buffer }>('SELECT key, value FROM strongroom_kv');
    await client.end();
    const stored = Buffer.concat(rows.flatMap((r) => [Buffer.from(r.key), r.value]));
    expect(rows.length).toBeGreaterThan(5);
    expect(stored.includes(marker)).toBe(false);
    expect(stored.includes(token)).toBe(false);
    expect(stored.includes(token.slice(4))).toBe(false);
  });

  it('"two servers on one database with the same unseal key: what one writes, the other serves"', async () => {
    const [url, key] = [await database(), randomBytes(32).toString('base64')];
    const a = await server(url, key);
    await a.request('POST', 'sys/mounts/shared', { body: { type: 'test' } });
    // Mount tables are read at start; a mount enabled on one running node reaching the others is the cluster's work.
    const c = await server(url, key);
    await a.request('POST', 'shared/data/one', { body: { value: 'from a' } });
    expect((await c.request('GET', 'shared/data/one')).body.data.value).toBe('from a');
    await c.request('POST', 'shared/data/two', { body: { value: 'from c' } });
    expect((await a.request('GET', 'shared/data/two')).body.data.value).toBe('from c');
    const token = (await a.request('POST', 'auth/token/create', { body: {} })).body.auth.client_token;
    expect((await c.request('GET', 'auth/token/lookup-self', { token })).status).toBe(200);
  });
});
