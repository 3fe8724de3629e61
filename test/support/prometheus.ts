/**
 * Scrapes of sys/metrics read with parse-prometheus-text-format. That library checks the exposition's syntax and
 * types, but folds every series of a labelled histogram or summary into one: so the samples are read a second time
 * with those families untyped, which keeps each `_bucket`, `_sum`, `_count` and quantile line with its labels.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export interface Scrape {
  /** Family name -> type, as the exposition declares it (COUNTER, GAUGE, HISTOGRAM, SUMMARY). */
  types: Map<string, string>;
  samples: Sample[];
  /** The value of the one sample named so whose labels include these; undefined when there is none. */
  value(name: string, labels?: Record<string, string>): number | undefined;
  /** Every series as name{label names and values}, values of samples left out: what a scrape adds to Prometheus. */
  series(): Set<string>;
}

export function parseScrape(text: string): Scrape {
  const types = new Map(parsePrometheusTextFormat(text).map((f) => [f.name, f.type]));
  const untyped = text.split('\n').filter((line) => !/^# TYPE \S+ (histogram|summary)$/.test(line)).join('\n');
  const samples = parsePrometheusTextFormat(untyped).flatMap((f) => f.metrics.filter((m) => m.value !== undefined).map((m) => ({ name: f.name, labels: m.labels ?? {}, value: Number(m.value) })));
  const matching = (name: string, labels: Record<string, string>) => samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return {
    types,
    samples,
    value(name, labels = {}) {
      const found = matching(name, labels);
      if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
      return found[0]?.value;
    },
    series: () => new Set(samples.map((s) => `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`)),
  };
}
