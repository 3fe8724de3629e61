import type { Logger } from 'pino';
import type { Metric, Registry } from 'prom-client';
import type { Family, Labels, MountMetrics } from '../core/framework.ts';
import type { CoreTelemetry } from '../core/metrics.ts';
import type { EventCounters } from '../core/events/outbox.ts';
import type { ServedRequest } from '../core/request.ts';
import type { LeaseEvents } from '../core/leases.ts';
import { LayeredStorage } from '../core/storage/layered.ts';
import type { Storage, StorageCondition, StorageOp } from '../core/storage/types.ts';
import { promClient } from '../lib/first-use.ts';
import { Counter, type CounterCell, type Collector, Histogram, type HistogramCell, type LabelSet, type Reading, Sourced, Summary, type SummaryCell } from './collectors.ts';
import { shared } from './families.ts';

/** Seconds; most answers take well under a millisecond, a directory or cloud call tens to thousands. */
const REQUEST_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** The namespace label Vault puts on its counters; Strongroom has only the root namespace. */
const NAMESPACE = 'root';
const NO_MOUNT = 'none';
const NO_OPERATION = 'none';

/**
 * A status as a label: the codes the server answers with, and otherwise its class. Some codes are chosen by the
 * client (sys/health?activecode=...) or by an upstream, and a label must not take hundreds of values.
 */
const KNOWN_STATUS = new Set([200, 201, 202, 204, 301, 302, 304, 307, 400, 401, 403, 404, 405, 408, 409, 412, 413, 415, 429, 431, 500, 501, 502, 503, 504]);
export function statusLabel(status: number): string {
  return KNOWN_STATUS.has(status) ? String(status) : `${Math.floor(status / 100)}xx`;
}

/** Vault's creation_ttl buckets (metricsutil.TTLBucket): the smallest bound the TTL does not exceed. */
const TTL_BUCKETS: Array<[number, string]> = [
  [60, '1m'], [600, '10m'], [1200, '20m'], [3600, '1h'], [7200, '2h'], [86_400, '1d'], [172_800, '2d'], [604_800, '7d'], [2_592_000, '30d'],
];
export function ttlBucket(seconds: number): string {
  return TTL_BUCKETS.find(([bound]) => seconds <= bound)?.[1] ?? '+Inf';
}

type StorageOperation = 'get' | 'put' | 'delete' | 'list' | 'transaction';

/** Vault's own families keep Vault's names (and, in the JSON format, its dotted ones), so its dashboards work. */
const VAULT_JSON_NAMES = new Map<string, string>();
function vault(dotted: string): string {
  const name = dotted.replace(/\./g, '_');
  VAULT_JSON_NAMES.set(name, dotted);
  return name;
}

/** Node's process collectors describe the process, which every server in it shares (tests start many): one set. */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    const { Registry, collectDefaultMetrics } = promClient();
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/**
 * A server's families in the order they were made, handed to a prom-client Registry only when first scraped: they
 * record without it (collectors.ts), and prom-client (~90 modules with its OpenTelemetry dependency) is then no part
 * of a start.
 */
class Families {
  readonly #made: Metric[] = [];
  #registry: Registry | undefined;

  registerMetric(metric: Metric): void {
    this.#made.push(metric);
    this.#registry?.registerMetric(metric);
  }

  registry(): Registry {
    if (!this.#registry) {
      this.#registry = new (promClient().Registry)();
      for (const metric of this.#made) this.#registry.registerMetric(metric);
    }
    return this.#registry;
  }
}

/** What `watch` reads of the core. */
export interface CoreSources {
  leases: { counts(): Promise<{ leases: number; irrevocable: number }> };
  audit: { failures(): Record<string, { request: number; response: number }> };
  leading(): boolean;
  /** This node's event counts (docs/events.md) and the records the cluster's event log holds. */
  events?: { counters: EventCounters; logSize(): number };
}

interface RequestCells {
  duration: HistogramCell;
  vault: SummaryCell;
  login: CounterCell | undefined;
}

export interface TelemetryOptions {
  logger: Logger;
  /** The physical store's name in Vault's storage families: `vault_<backend>_get` and so on. */
  storageBackend: string;
}

/**
 * One server's metrics: a prom-client Registry of its own (never the global one), what the core records into it, and
 * what each mount gets to record its own events (`forMount`).
 */
export class Telemetry implements CoreTelemetry {
  readonly #registry = new Families();
  readonly #logger: Logger;
  readonly #durations = new Histogram('strongroom_request_duration_seconds', 'Requests through the core by mount, operation and status; _count is the number of requests.', ['mount', 'operation', 'status'], REQUEST_BUCKETS).register(this.#registry);
  readonly #handle = new Summary(vault('vault.core.handle_request'), 'Time to handle a non-login request (ms).').register(this.#registry).cell();
  readonly #handleLogin = new Summary(vault('vault.core.handle_login_request'), 'Time to handle a login request (ms).').register(this.#registry).cell();
  readonly #logins = new Counter('strongroom_logins_total', 'Login requests to auth methods by mount and result.', ['mount', 'result']).register(this.#registry);
  readonly #tokens = new Counter(vault('vault.token.creation'), 'Tokens created.', ['namespace', 'auth_method', 'mount_point', 'creation_ttl', 'token_type']).register(this.#registry);
  readonly #leasesCreated = new Counter('strongroom_leases_created_total', 'Leases registered, by mount.', ['mount']).register(this.#registry);
  readonly #revocations = new Counter('strongroom_lease_revocations_total', 'Lease revocations (expiry, explicit, token revocation), by mount and result.', ['mount', 'result']).register(this.#registry);
  readonly #revokeTime = new Summary(vault('vault.expire.revoke'), 'Time to revoke a lease (ms).').register(this.#registry).cell();
  readonly #storage: Record<StorageOperation, SummaryCell>;
  /**
   * Cells by mount, operation and status, resolved once per combination: a request then touches only numbers. Logins
   * apart, since the same mount, operation and status may be a login or not (auth/cloud/login, auth/cloud/role/x).
   */
  readonly #requests = new Map<string, Map<string, Map<number, RequestCells>>>();
  readonly #loginRequests = new Map<string, Map<string, Map<number, RequestCells>>>();
  readonly #families = new Map<string, Collector>();

  constructor(opts: TelemetryOptions) {
    this.#logger = opts.logger;
    const timer = (op: StorageOperation) => new Summary(vault(`vault.${opts.storageBackend}.${op}`), `Time of a ${op} in the ${opts.storageBackend} storage (ms).`).register(this.#registry).cell();
    this.#storage = { get: timer('get'), put: timer('put'), delete: timer('delete'), list: timer('list'), transaction: timer('transaction') };
  }

  /**
   * Starts Node's process collectors (GC, event-loop lag, ...) ahead of the first scrape, so that they observe the
   * process from then on: the server calls it once it listens (createServer, `finishStart`).
   */
  observeProcess(): void {
    processMetrics();
  }

  /** Called by the core once a request is answered; `started` is performance.now() when it arrived. */
  request(served: ServedRequest, status: number, started: number): void {
    const now = performance.now();
    const ms = now - started;
    const cells = this.#requestCells(served.mount ?? NO_MOUNT, served.operation ?? NO_OPERATION, status, served.login);
    cells.duration.observe(ms / 1000);
    cells.vault.observe(ms, now);
    cells.login?.inc();
  }

  #requestCells(mount: string, operation: string, status: number, login: boolean): RequestCells {
    const table = login ? this.#loginRequests : this.#requests;
    let byOperation = table.get(mount);
    if (!byOperation) table.set(mount, (byOperation = new Map()));
    let byStatus = byOperation.get(operation);
    if (!byStatus) byOperation.set(operation, (byStatus = new Map()));
    let cells = byStatus.get(status);
    if (!cells) {
      cells = {
        duration: this.#durations.cell(mount, operation, statusLabel(status)),
        vault: login ? this.#handleLogin : this.#handle,
        login: login ? this.#logins.cell(mount, status < 400 ? 'success' : 'failure') : undefined,
      };
      byStatus.set(status, cells);
    }
    return cells;
  }

  /** A token issued by an auth method's login or by the token store. */
  tokenCreated(mount: { type: string; path: string }, ttlSeconds: number): void {
    this.#tokens.cell(NAMESPACE, mount.type, mount.path, ttlBucket(ttlSeconds), 'service').inc();
  }

  readonly leaseEvents: LeaseEvents = {
    registered: (mountPath) => this.#leasesCreated.cell(mountPath).inc(),
    revoked: (mountPath, started) => {
      const now = performance.now();
      this.#revokeTime.observe(now - started, now);
      this.#revocations.cell(mountPath, 'success').inc();
    },
    revokeFailed: (mountPath) => this.#revocations.cell(mountPath, 'failure').inc(),
  };

  /** The physical store with each call timed (Vault's vault_<backend>_<operation> summaries). */
  instrument(storage: Storage): Storage {
    return new TimedStorage(storage, this.#storage);
  }

  /** The server-wide families read from the core when scraped: leases, audit device failures, leadership. */
  watch(core: CoreSources): void {
    const counts = shared(() => core.leases.counts());
    this.#source(vault('vault.expire.num_leases'), 'Leases stored (secrets and tokens), on the whole cluster.', 'gauge', async () => [{ value: (await counts()).leases }]);
    this.#source(vault('vault.expire.num_irrevocable_leases'), 'Leases whose revocation ran out of retries; sys/leases/revoke-force ends them.', 'gauge', async () => [{ value: (await counts()).irrevocable }]);
    const devices = () => Object.entries(core.audit.failures());
    const total = (entry: 'request' | 'response') => () => [{ value: devices().reduce((sum, [, d]) => sum + d[entry], 0) }];
    this.#source(vault('vault.audit.log_request_failure'), 'Request entries an audit device could not write (all devices).', 'counter', total('request'));
    this.#source(vault('vault.audit.log_response_failure'), 'Response entries an audit device could not write (all devices).', 'counter', total('response'));
    this.#source('strongroom_audit_log_failures_total', 'Entries an audit device could not write, by device and entry (since the device was opened on this node).', 'counter',
      () => devices().flatMap(([device, d]) => (['request', 'response'] as const).map((entry) => ({ labels: { device, entry }, value: d[entry] }))));
    if (core.events) this.#watchEvents(core.events);
    this.#source('strongroom_leader', 'Whether this node runs the cluster\'s background work (expiry, rotations); a node of its own always does.', 'gauge', () => [{ value: core.leading() ? 1 : 0 }]);
  }

  #watchEvents({ counters, logSize }: NonNullable<CoreSources['events']>): void {
    this.#source('strongroom_events_published_total', 'Events this node committed to the event log.', 'counter', () => [{ value: counters.published }]);
    this.#source('strongroom_events_delivered_total', 'Events this node sent to subscribers (WebSocket and Server-Sent Events).', 'counter', () => [{ value: counters.delivered }]);
    this.#source('strongroom_events_dropped_total', 'Subscribers this node closed because they read too slowly (they resume with after=).', 'counter', () => [{ value: counters.dropped }]);
    this.#source('strongroom_events_webhook_failures_total', 'Events a webhook did not accept after its last attempt (now in its dead-letter list).', 'counter', () => [{ value: counters.webhookFailures }]);
    this.#source('strongroom_events_subscribers', 'Subscribers connected to this node.', 'gauge', () => [{ value: counters.subscribers }]);
    this.#source('strongroom_events_log_records', 'Records in the cluster\'s event log (bounded by its retention).', 'gauge', () => [{ value: logSize() }]);
  }

  #source(name: string, help: string, type: 'gauge' | 'counter', read: () => Promise<Reading[]> | Reading[]): void {
    this.#sourced({ name, help, type }).add({}, read);
  }

  #sourced(family: { name: string; help: string; type: 'gauge' | 'counter' }): Sourced {
    return this.#family(family.name, () => new Sourced(family.name, family.help, family.type, (err, fixed) => {
      this.#logger.warn({ metric: family.name, ...fixed, err: (err as Error)?.message }, 'a metric could not be read; it is left out of this scrape');
    }));
  }

  #family<C extends Collector>(name: string, make: () => C): C {
    let family = this.#families.get(name) as C | undefined;
    if (!family) this.#families.set(name, (family = make().register(this.#registry)));
    return family;
  }

  /** What a mount records through; `close` drops its gauges when it goes (its counters stay until the process ends). */
  forMount(mountPath: string): MountMetrics & { close(): void } {
    const removers = new Map<string, () => void>();
    const withMount = (family: Family<Labels>) => ['mount', ...family.labels];
    return {
      counter: <L extends Labels>(family: Family<L>) => {
        const counter = this.#family(family.name, () => new Counter(family.name, family.help, withMount(family as Family<Labels>)));
        return { inc: (labels: L, by?: number) => counter.cell(mountPath, ...family.labels.map((l) => labels[l]!)).inc(by) };
      },
      histogram: <L extends Labels>(family: Family<L>) => {
        const histogram = this.#family(family.name, () => new Histogram(family.name, family.help, withMount(family as Family<Labels>), family.buckets ?? []));
        return { observe: (labels: L, value: number) => histogram.cell(mountPath, ...family.labels.map((l) => labels[l]!)).observe(value) };
      },
      gauge: <L extends Labels>(family: Family<L>, read: () => Promise<Array<{ labels: L; value: number }>>) => {
        removers.get(family.name)?.();
        removers.set(family.name, this.#sourced({ ...family, type: family.type === 'counter' ? 'counter' : 'gauge' }).add({ mount: mountPath }, read as () => Promise<Reading[]>));
      },
      close: () => {
        for (const remove of removers.values()) remove();
        removers.clear();
      },
    };
  }

  /**
   * The Prometheus text exposition, or Vault's JSON shape ({Timestamp, Gauges, Counters, Samples}). Families read
   * from storage are read again when their last reading is older than `maxAgeMs` (docs/telemetry.md).
   */
  async render(format: 'prometheus' | 'json', maxAgeMs = 0): Promise<{ contentType: string; body: string }> {
    await Promise.all([...this.#families.values()].map((f) => (f instanceof Sourced ? f.refresh(maxAgeMs) : undefined)));
    if (format === 'prometheus') {
      const registry = this.#registry.registry();
      const [own, process] = await Promise.all([registry.metrics(), processMetrics().metrics()]);
      return { contentType: registry.contentType, body: `${own}\n${process}` };
    }
    const families = [...(await this.#registry.registry().getMetricsAsJSON()), ...(await processMetrics().getMetricsAsJSON())];
    return { contentType: 'application/json', body: JSON.stringify(vaultJson(families as unknown as JsonFamily[], new Date())) };
  }
}

type JsonFamily = { name: string; type: string; values: Array<{ labels: LabelSet; value: number; metricName?: string }> };

/**
 * Vault's JSON format comes from go-metrics' in-memory sink: gauges as values, counters and samples as aggregates of
 * the last interval. Prometheus families are cumulative, so Counters and Samples here count since the process started.
 */
function vaultJson(families: JsonFamily[], now: Date) {
  const name = (n: string) => VAULT_JSON_NAMES.get(n) ?? n;
  const plain = (labels: LabelSet) => Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)]));
  const Gauges: unknown[] = [];
  const Counters: unknown[] = [];
  const Samples: unknown[] = [];
  for (const family of families) {
    if (family.type === 'gauge') for (const v of family.values) Gauges.push({ Name: name(family.name), Value: v.value, Labels: plain(v.labels) });
    else if (family.type === 'counter') for (const v of family.values) Counters.push({ Name: name(family.name), Count: v.value, Sum: v.value, Labels: plain(v.labels) });
    else {
      // One sample per label set, from the family's _count and _sum series.
      const sums = new Map(family.values.filter((v) => v.metricName === `${family.name}_sum`).map((v) => [JSON.stringify(v.labels), v.value]));
      for (const v of family.values.filter((x) => x.metricName === `${family.name}_count`)) {
        const sum = sums.get(JSON.stringify(v.labels)) ?? 0;
        Samples.push({ Name: name(family.name), Count: v.value, Sum: sum, Mean: v.value ? sum / v.value : 0, Labels: plain(v.labels) });
      }
    }
  }
  const Timestamp = `${now.toISOString().slice(0, 19).replace('T', ' ')} +0000 UTC`;
  return { Timestamp, Gauges, Counters, Samples };
}

/** The physical store with every call timed; everything else passes through. */
class TimedStorage extends LayeredStorage {
  readonly #timers: Record<StorageOperation, SummaryCell>;

  constructor(inner: Storage, timers: Record<StorageOperation, SummaryCell>) {
    super(inner);
    this.#timers = timers;
  }

  /**
   * Arguments are evaluated in order: the clock is read before the call starts. Callbacks on the call's promise, not an
   * async function: one promise per storage operation instead of two and an await (every request reads storage).
   */
  #timed<T>(op: StorageOperation, started: number, call: Promise<T>): Promise<T> {
    const observe = () => {
      const now = performance.now();
      this.#timers[op].observe(now - started, now);
    };
    return call.then((value) => {
      observe();
      return value;
    }, (err: unknown) => {
      observe();
      throw err;
    });
  }

  get(key: string): Promise<Buffer | undefined> {
    return this.#timed('get', performance.now(), this.inner.get(key));
  }
  put(key: string, value: Buffer): Promise<void> {
    return this.#timed('put', performance.now(), this.inner.put(key, value));
  }
  delete(key: string): Promise<void> {
    return this.#timed('delete', performance.now(), this.inner.delete(key));
  }
  list(prefix: string): Promise<string[]> {
    return this.#timed('list', performance.now(), this.inner.list(prefix));
  }
  transaction(ops: StorageOp[], conditions?: StorageCondition[]): Promise<boolean> {
    return this.#timed('transaction', performance.now(), this.inner.transaction(ops, conditions));
  }
}
