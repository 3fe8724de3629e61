/**
 * Vault's ParseDurationSecond: integers are seconds, a whole-string `<int>d` is days, anything else is a
 * Go duration (`1h30m`, `1.5h`). Floats in JSON are refused rather than silently truncated.
 */
const UNIT_NS: Record<string, number> = {
  ns: 1, us: 1e3, 'µs': 1e3, 'μs': 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9,
};

export class DurationError extends Error {}

export function parseGoDurationMs(input: string): number {
  let s = input;
  let sign = 1;
  if (s.startsWith('-') || s.startsWith('+')) {
    if (s[0] === '-') sign = -1;
    s = s.slice(1);
  }
  if (s === '0') return 0;
  if (s === '') throw new DurationError(`invalid duration "${input}"`);
  let totalNs = 0;
  const re = /^(\d*)(?:\.(\d*))?([a-zµμ]+)/;
  while (s.length > 0) {
    const m = re.exec(s);
    if (!m || (m[1] === '' && (m[2] === undefined || m[2] === ''))) {
      if (/^\d+(\.\d*)?$/.test(s)) throw new DurationError(`missing unit in duration "${input}"`);
      throw new DurationError(`invalid duration "${input}"`);
    }
    const unit = UNIT_NS[m[3]];
    if (unit === undefined) throw new DurationError(`unknown unit "${m[3]}" in duration "${input}"`);
    const whole = m[1] === '' ? 0 : Number(m[1]);
    const frac = m[2] ? Number(`0.${m[2]}`) : 0;
    totalNs += (whole + frac) * unit;
    s = s.slice(m[0].length);
  }
  if (!Number.isFinite(totalNs) || totalNs > 9.2e18) throw new DurationError(`duration "${input}" is too large`);
  return (sign * totalNs) / 1e6;
}

/** Returns whole seconds; throws DurationError with a message suited to a 400. */
export function parseDurationSecond(value: unknown): number {
  if (value === null || value === undefined || value === '') return 0;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new DurationError('could not parse duration from input');
    return Math.trunc(value);
  }
  if (typeof value !== 'string') throw new DurationError('could not parse duration from input');
  const s = value.trim();
  if (/^[-+]?\d+$/.test(s)) return Number(s);
  const days = /^([-+]?\d+)d$/.exec(s);
  if (days) return Number(days[1]) * 86_400;
  return Math.trunc(parseGoDurationMs(s) / 1000);
}

/** Go's time.Duration String() for whole seconds, used in warnings ("1h0m0s"). */
export function formatGoDuration(seconds: number): string {
  if (seconds === 0) return '0s';
  const neg = seconds < 0;
  let s = Math.abs(seconds);
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  const body = h > 0 ? `${h}h${m}m${s}s` : m > 0 ? `${m}m${s}s` : `${s}s`;
  return neg ? `-${body}` : body;
}
