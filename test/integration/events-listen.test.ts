// PostgreSQL's LISTEN strongroom_events as the event feed's wake-up (docs/events.md, "Retention and the log's size"):
// a reader on another node learns of a commit from its notification, not from its poll, which is set here to a
// minute so that only the notification can wake it in time. Two real stores on one real database.
import { afterEach, describe, expect, inject, it } from 'vitest';
import pg from 'pg';
import pino from 'pino';
import { EventFeed, FEED_DEFAULTS } from '../../src/core/events/feed.ts';
import { PostgresStorage } from '../../src/core/storage/postgres.ts';
import { createDatabase } from '../support/postgres.ts';

const postgres = inject('postgres');
const closers: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  while (closers.length) await closers.pop()!().catch(() => undefined);
});

/** Whether some connection of this database has run `LISTEN strongroom_events` (the signals connection's last query). */
async function listening(url: string): Promise<boolean> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query("SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'strongroom-signals' AND query = 'LISTEN strongroom_events'");
    return rows.length > 0;
  } finally {
    await client.end();
  }
}

describe('the event feed on PostgreSQL', () => {
  it('"a reader on another node is woken by the commit\'s NOTIFY at once, the poll being only the fallback"', async () => {
    const db = await createDatabase(postgres);
    closers.push(() => db.drop());
    const writer = await PostgresStorage.open(db.url);
    closers.push(() => writer.close());
    const reader = await PostgresStorage.open(db.url);
    closers.push(() => reader.close());
    const feed = new EventFeed(() => reader.log, () => false, pino({ level: 'silent' }), { ...FEED_DEFAULTS, pollMs: 60_000 }, (l) => reader.onEventsCommitted(l));
    await feed.start();
    closers.push(async () => feed.stop());
    for (let i = 0; !(await listening(db.url)); i++) {
      expect(i, 'the reader never listened').toBeLessThan(100);
      await new Promise((r) => setTimeout(r, 100));
    }

    for (let round = 1; round <= 3; round++) {
      const head = feed.head;
      const started = performance.now();
      expect(await writer.transaction([{ type: 'put', key: `k${round}`, value: Buffer.from('v') }, { type: 'append', value: Buffer.from('{}') }])).toBe(true);
      await feed.changed(head, new AbortController().signal, 30_000);
      expect(feed.head).toBe(head + 1);
      // The poll would have taken a minute; the notification takes milliseconds (bound loosely: the machine is shared).
      expect(performance.now() - started).toBeLessThan(10_000);
    }
  });
});
