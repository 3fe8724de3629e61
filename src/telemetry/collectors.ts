import type { Metric, Registry } from 'prom-client';

/**
 * Metrics that prom-client formats but that record without it. prom-client hashes and validates a label set on every
 * observation (~250-350 ns), and its summary feeds a t-digest; a request pays for several of these, which is a few
 * percent of an authenticated read. Here a label set is resolved once to a cell, and recording is arithmetic on it.
 */
export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary';
export type LabelSet = Record<string, string>;
export interface Sample { labels: LabelSet; value: number; metricName?: string }

/** What a prom-client Registry asks of a metric when it is scraped (text or JSON). */
export abstract class Collector {
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;

  constructor(name: string, help: string, type: MetricType) {
    this.name = name;
    this.help = help;
    this.type = type;
  }

  protected abstract samples(): Sample[] | Promise<Sample[]>;

  async get(): Promise<{ name: string; help: string; type: MetricType; aggregator: 'sum'; values: Sample[] }> {
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: await this.samples() };
  }

  register(registry: Pick<Registry, 'registerMetric'>): this {
    // The registry only calls get(); its Metric type describes prom-client's own classes.
    registry.registerMetric(this as unknown as Metric);
    return this;
  }
}

/** One cell per label set, found by walking one map per label: no string is built to look a set up. */
class Cells<C> {
  readonly #root = new Map<string, unknown>();
  readonly #labelNames: readonly string[];
  readonly #make: (labels: LabelSet) => C;
  readonly all: C[] = [];

  constructor(labelNames: readonly string[], make: (labels: LabelSet) => C) {
    this.#labelNames = labelNames;
    this.#make = make;
  }

  get(values: readonly string[]): C {
    let node = this.#root;
    const last = this.#labelNames.length - 1;
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]!) as Map<string, unknown> | undefined;
      if (!next) node.set(values[i]!, (next = new Map()));
      node = next;
    }
    const key = last < 0 ? '' : values[last]!;
    let cell = node.get(key) as C | undefined;
    if (!cell) {
      cell = this.#make(Object.fromEntries(this.#labelNames.map((n, i) => [n, values[i]!])));
      node.set(key, cell);
      this.all.push(cell);
    }
    return cell;
  }
}

/** A collector whose values live in one cell per label set: `cell(...)` resolves a set once, recording uses the cell. */
abstract class Celled<C> extends Collector {
  protected readonly cells: Cells<C>;

  constructor(name: string, help: string, type: MetricType, labelNames: readonly string[], make: (labels: LabelSet) => C) {
    super(name, help, type);
    this.cells = new Cells(labelNames, make);
  }

  cell(...values: string[]): C {
    return this.cells.get(values);
  }
}

export class HistogramCell {
  readonly labels: LabelSet;
  readonly #bounds: readonly number[];
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(labels: LabelSet, bounds: readonly number[]) {
    this.labels = labels;
    this.#bounds = bounds;
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    const bounds = this.#bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]!++;
        return;
      }
    }
  }
}

export class Histogram extends Celled<HistogramCell> {
  readonly #bounds: readonly number[];

  constructor(name: string, help: string, labelNames: readonly string[], bounds: readonly number[]) {
    super(name, help, 'histogram', labelNames, (labels) => new HistogramCell(labels, bounds));
    this.#bounds = bounds;
  }

  protected samples(): Sample[] {
    const out: Sample[] = [];
    for (const cell of this.cells.all) {
      let cumulative = 0;
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += cell.counts[i]!;
        out.push({ metricName: `${this.name}_bucket`, labels: { ...cell.labels, le: String(this.#bounds[i]) }, value: cumulative });
      }
      out.push({ metricName: `${this.name}_bucket`, labels: { ...cell.labels, le: '+Inf' }, value: cell.count });
      out.push({ metricName: `${this.name}_sum`, labels: cell.labels, value: cell.sum });
      out.push({ metricName: `${this.name}_count`, labels: cell.labels, value: cell.count });
    }
    return out;
  }
}

/** Vault's summaries (go-metrics' Prometheus sink) report quantiles over the last ten seconds. */
const SUMMARY_WINDOW_MS = 10_000;
/** Observations kept per cell: beyond this many in a window, the quantiles describe the most recent ones. */
const SUMMARY_SAMPLES = 1024;
const QUANTILES = [0.5, 0.9, 0.99] as const;

export class SummaryCell {
  readonly labels: LabelSet;
  readonly values = new Float64Array(SUMMARY_SAMPLES);
  readonly times = new Float64Array(SUMMARY_SAMPLES).fill(Number.NEGATIVE_INFINITY);
  #next = 0;
  sum = 0;
  count = 0;

  constructor(labels: LabelSet) {
    this.labels = labels;
  }

  /** `at` is performance.now() when the observation was made (callers timing something already have it). */
  observe(value: number, at: number): void {
    this.sum += value;
    this.count++;
    this.values[this.#next] = value;
    this.times[this.#next] = at;
    this.#next = (this.#next + 1) % SUMMARY_SAMPLES;
  }

  /** The observations of the last window, sorted; also Vault's JSON Min/Max/Mean/Stddev come from these. */
  recent(now: number): number[] {
    const out: number[] = [];
    for (let i = 0; i < SUMMARY_SAMPLES; i++) if (this.times[i]! >= now - SUMMARY_WINDOW_MS) out.push(this.values[i]!);
    return out.sort((a, b) => a - b);
  }
}

export class Summary extends Celled<SummaryCell> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    super(name, help, 'summary', labelNames, (labels) => new SummaryCell(labels));
  }

  protected samples(): Sample[] {
    const now = performance.now();
    const out: Sample[] = [];
    for (const cell of this.cells.all) {
      const recent = cell.recent(now);
      // An empty window reports NaN, as Vault's do.
      for (const q of QUANTILES) out.push({ labels: { ...cell.labels, quantile: String(q) }, value: recent.length ? recent[Math.ceil(q * recent.length) - 1]! : Number.NaN });
      out.push({ metricName: `${this.name}_sum`, labels: cell.labels, value: cell.sum });
      out.push({ metricName: `${this.name}_count`, labels: cell.labels, value: cell.count });
    }
    return out;
  }
}

/** Values a source reports when scraped; the labels of its family beside the ones the source was added with. */
export type Reading = { labels?: LabelSet; value: number };
export type Source = () => Reading[] | Promise<Reading[]>;

/**
 * A gauge (or a counter kept elsewhere) whose values are read when scraped, from any number of sources: each
 * mount adds its own and removes it when it goes. Concurrent scrapes share one reading, so a source that reads
 * storage runs once however many scrapes arrive together, and a scrape may take the last reading if it is recent
 * enough (`refresh`): a caller without a token never makes the server read storage more than once per interval.
 * A source that fails is left out of that reading.
 */
export class Sourced extends Collector {
  readonly #sources = new Map<symbol, { fixed: LabelSet; source: Source }>();
  readonly #onError: (err: unknown, fixed: LabelSet) => void;
  #reading: Promise<Sample[]> | undefined;
  /** The last reading and when it started (performance.now()). */
  #last: { at: number; samples: Sample[] } | undefined;

  constructor(name: string, help: string, type: 'gauge' | 'counter', onError: (err: unknown, fixed: LabelSet) => void) {
    super(name, help, type);
    this.#onError = onError;
  }

  add(fixed: LabelSet, source: Source): () => void {
    const key = Symbol(this.name);
    this.#sources.set(key, { fixed, source });
    this.#last = undefined;
    return () => {
      this.#sources.delete(key);
      this.#last = undefined;
    };
  }

  /** Reads again unless the last reading started at most `maxAgeMs` ago; one read runs at a time, shared. */
  async refresh(maxAgeMs: number): Promise<void> {
    if (this.#last && performance.now() - this.#last.at <= maxAgeMs) return;
    if (!this.#reading) {
      const at = performance.now();
      this.#reading = this.#read().then((samples) => {
        this.#last = { at, samples };
        return samples;
      }).finally(() => (this.#reading = undefined));
    }
    await this.#reading;
  }

  /** The last reading (a scrape refreshes it first, as old as its caller may be given). */
  protected async samples(): Promise<Sample[]> {
    if (!this.#last) await this.refresh(0);
    return this.#last?.samples ?? [];
  }

  async #read(): Promise<Sample[]> {
    const sources = [...this.#sources.values()];
    const results = await Promise.allSettled(sources.map(async ({ source }) => source()));
    const out: Sample[] = [];
    results.forEach((result, i) => {
      const { fixed } = sources[i]!;
      if (result.status === 'rejected') return this.#onError(result.reason, fixed);
      for (const { labels, value } of result.value) out.push({ labels: { ...fixed, ...labels }, value });
    });
    return out;
  }
}

export class CounterCell {
  readonly labels: LabelSet;
  value = 0;

  constructor(labels: LabelSet) {
    this.labels = labels;
  }

  inc(by = 1): void {
    this.value += by;
  }
}

export class Counter extends Celled<CounterCell> {
  constructor(name: string, help: string, labelNames: readonly string[] = []) {
    super(name, help, 'counter', labelNames, (labels) => new CounterCell(labels));
  }

  protected samples(): Sample[] {
    return this.cells.all.map((cell) => ({ labels: cell.labels, value: cell.value }));
  }
}
