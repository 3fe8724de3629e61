declare module 'parse-prometheus-text-format' {
  interface ParsedMetric {
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    quantiles?: Record<string, string>;
    count?: string;
    sum?: string;
  }
  export default function parsePrometheusTextFormat(text: string): Array<{ name: string; help: string; type: string; metrics: ParsedMetric[] }>;
}
