/**
 * Vault's ParseDurationSecond: integers are seconds, a whole-string `<int>d` is days, anything else is a
 * Go duration (`1h30m`, `1.5h`). Floats in JSON are refused rather than silently truncated.
 *
 * Every duration is bounded (docs/limits.md): past the bound it is an error, never a number that overflows a
 * timer or a date further on.
 */
const UNIT_NS: Record<string, number> = {
  ns: 1, us: 1e3, 'µs': 1e3, 'μs': 1e3, ms: 1e6, s: 1e9, m: 60e9, h: 3600e9,
};

/** The longest duration anything accepts: 100 years of 365 days, far below Go's 292-year time.Duration. */
export const MAX_DURATION_SECONDS = 100 * 365 * 86_400;
/** Longer than any sensible spelling ("1h2m3s4ms5us6ns" is 15); bounds the parser's work and what an error echoes. */
export const MAX_DURATION_TEXT = 64;

export class DurationError extends Error {}

/** A duration past a maximum; the message names the bound, never the value. */
export class DurationTooLongError extends DurationError {
  constructor(max: number) {
    super(`longer than the maximum of ${describeSeconds(max)}`);
  }
}

function parseGoDurationMs(input: string): number {
  let s = input;
  let sign = 1;
  if (s.startsWith('-') || s.startsWith('+')) {
    if (s[0] === '-') sign = -1;
    s = s.slice(1);
  }
  if (s === '0') return 0;
  // The value is not quoted: it may be a secret sent in the wrong field.
  if (s === '') throw new DurationError('invalid duration');
  let totalNs = 0;
  const re = /^(\d*)(?:\.(\d*))?([a-zµμ]+)/;
  while (s.length > 0) {
    const m = re.exec(s);
    if (!m || (m[1] === '' && (m[2] === undefined || m[2] === ''))) {
      if (/^\d+(\.\d*)?$/.test(s)) throw new DurationError('missing unit in duration');
      throw new DurationError('invalid duration');
    }
    const unit = UNIT_NS[m[3]];
    if (unit === undefined) throw new DurationError(`unknown unit in duration (units: ${Object.keys(UNIT_NS).join(', ')})`);
    const whole = m[1] === '' ? 0 : Number(m[1]);
    const frac = m[2] ? Number(`0.${m[2]}`) : 0;
    totalNs += (whole + frac) * unit;
    s = s.slice(m[0].length);
  }
  return (sign * totalNs) / 1e6;
}

/** Returns whole seconds; throws DurationError with a message suited to a 400. */
export function parseDurationSecond(value: unknown): number {
  if (value === null || value === undefined || value === '') return 0;
  let seconds: number;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new DurationError('could not parse duration from input');
    seconds = Math.trunc(value);
  } else if (typeof value === 'string') {
    if (value.length > MAX_DURATION_TEXT) throw new DurationError(`a duration is at most ${MAX_DURATION_TEXT} characters`);
    const s = value.trim();
    const days = /^([-+]?\d+)d$/.exec(s);
    if (/^[-+]?\d+$/.test(s)) seconds = Number(s);
    else if (days) seconds = Number(days[1]) * 86_400;
    else seconds = Math.trunc(parseGoDurationMs(s) / 1000);
  } else {
    throw new DurationError('could not parse duration from input');
  }
  // A digit string can spell Infinity (400 nines), which no comparison below would catch as too long.
  if (!(Math.abs(seconds) <= MAX_DURATION_SECONDS)) throw new DurationTooLongError(MAX_DURATION_SECONDS);
  return seconds === 0 ? 0 : seconds; // "-0" is zero, not a negative duration
}

/** "3600 seconds (1h0m0s)": the bound both as clients send it and as Go prints it. */
export function describeSeconds(seconds: number): string {
  return `${seconds} seconds (${formatGoDuration(seconds)})`;
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
