import pino from 'pino';
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { Histogram, Sourced, Summary } from '../../src/telemetry/collectors.ts';
import { statusLabel, ttlBucket, Telemetry } from '../../src/telemetry/telemetry.ts';
import { parseScrape } from '../support/prometheus.ts';

describe('label values', () => {
  it.each([[0, '1m'], [60, '1m'], [61, '10m'], [3600, '1h'], [3601, '2h'], [86_400, '1d'], [30 * 86_400, '30d'], [30 * 86_400 + 1, '+Inf']])(
    'a token TTL of %is is in Vault\'s creation_ttl bucket %s', (seconds, bucket) => expect(ttlBucket(seconds)).toBe(bucket));

  it.each([[200, '200'], [204, '204'], [503, '503'], [299, '2xx'], [599, '5xx'], [123, '1xx']])('status %i is labelled %s', (status, label) => expect(statusLabel(status)).toBe(label));
});

describe('collectors', () => {
  const scrapeOf = async (...collectors: Array<{ register(r: Registry): unknown }>) => {
    const registry = new Registry();
    for (const c of collectors) c.register(registry);
    return parseScrape(await registry.metrics());
  };

  it('"a histogram cell counts into cumulative buckets, with _sum and _count"', async () => {
    const h = new Histogram('h', 'help', ['mount'], [0.1, 1]);
    const cell = h.cell('kv/');
    for (const v of [0.05, 0.5, 0.5, 5]) cell.observe(v);
    const m = await scrapeOf(h);
    expect(['0.1', '1', '+Inf'].map((le) => m.value('h_bucket', { mount: 'kv/', le }))).toEqual([1, 3, 4]);
    expect(m.value('h_sum', { mount: 'kv/' })).toBeCloseTo(6.05);
    expect(m.value('h_count', { mount: 'kv/' })).toBe(4);
    expect(m.types.get('h')).toBe('HISTOGRAM');
  });

  it('"a summary reports quantiles of the last ten seconds (NaN without any) and counts from the start"', async () => {
    const s = new Summary('s', 'help');
    const cell = s.cell();
    expect((await scrapeOf(s)).value('s', { quantile: '0.5' })).toBeNaN();
    const now = performance.now();
    cell.observe(1000, now - 20_000);
    for (let v = 1; v <= 100; v++) cell.observe(v, now);
    const m = await scrapeOf(s);
    expect([m.value('s', { quantile: '0.5' }), m.value('s', { quantile: '0.9' }), m.value('s', { quantile: '0.99' })]).toEqual([50, 90, 99]);
    expect(m.value('s_count')).toBe(101);
  });

  it('"a sourced gauge reads its sources when scraped, once for scrapes that arrive together, and leaves out one that fails"', async () => {
    const failures: unknown[] = [];
    const g = new Sourced('g', 'help', 'gauge', (err) => failures.push(err));
    let reads = 0;
    g.add({ mount: 'a/' }, async () => [{ value: ++reads }]);
    const remove = g.add({ mount: 'b/' }, async () => {
      throw new Error('storage away');
    });
    const registry = new Registry();
    g.register(registry);
    const [one, two] = await Promise.all([registry.metrics(), registry.metrics()]);
    expect(one).toBe(two);
    expect(reads).toBe(1);
    expect(parseScrape(one).samples).toEqual([{ name: 'g', labels: { mount: 'a/' }, value: 1 }]);
    expect(failures).toHaveLength(1);
    remove();
    await registry.metrics();
    expect(failures).toHaveLength(1);
  });

  it('"cached for the scrape interval": refresh(maxAge) reads again only when the last reading is older than maxAge; refresh(0) always reads', async () => {
    const g = new Sourced('g', 'help', 'gauge', () => undefined);
    let reads = 0;
    g.add({}, async () => [{ value: ++reads }]);
    const registry = new Registry();
    g.register(registry);
    await g.refresh(60_000);
    for (let i = 0; i < 10; i++) await g.refresh(60_000);
    expect(reads).toBe(1);
    expect(parseScrape(await registry.metrics()).samples).toEqual([{ name: 'g', labels: {}, value: 1 }]);
    await new Promise((resolve) => setTimeout(resolve, 5));
    await g.refresh(1);
    expect(reads).toBe(2);
    await g.refresh(0);
    expect(parseScrape(await registry.metrics()).samples).toEqual([{ name: 'g', labels: {}, value: 3 }]);
  });
});

describe('a server\'s telemetry', () => {
  it('"keeps a login and another request of the same mount, operation and status apart"', async () => {
    const t = new Telemetry({ logger: pino({ level: 'silent' }), storageBackend: 'inmem' });
    const started = performance.now();
    t.request({ id: '1', mount: 'auth/cloud/', operation: 'update', login: false }, 200, started);
    t.request({ id: '2', mount: 'auth/cloud/', operation: 'update', login: true }, 200, started);
    const m = parseScrape((await t.render('prometheus')).body);
    expect(m.value('strongroom_logins_total', { mount: 'auth/cloud/', result: 'success' })).toBe(1);
    expect(m.value('vault_core_handle_login_request_count')).toBe(1);
    expect(m.value('vault_core_handle_request_count')).toBe(1);
    expect(m.value('strongroom_request_duration_seconds_count', { mount: 'auth/cloud/', operation: 'update', status: '200' })).toBe(2);
  });
});
