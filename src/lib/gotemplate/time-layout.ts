// Go's reference-time layouts (Mon Jan 2 15:04:05 MST 2006) for Vault's `timestamp` function.
// Times are formatted in UTC, which is what Vault's servers run in and what makes output stable.

const LONG_DAYS = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'];
const LONG_MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August', 'September', 'October', 'November', 'December'];

// Longest first where one chunk is a prefix of another, as Go's nextStdChunk checks them.
const CHUNKS = [
  'January', 'Jan', 'Monday', 'Mon', 'MST',
  '-07:00:00', '-070000', '-07:00', '-0700', '-07',
  'Z07:00:00', 'Z070000', 'Z07:00', 'Z0700', 'Z07',
  '2006', '002', '__2', '_2', '01', '02', '03', '04', '05', '06', '15', 'PM', 'pm',
  '1', '2', '3', '4', '5',
];

export function formatGoTime(date: Date, layout: string): string {
  let out = '';
  let i = 0;
  while (i < layout.length) {
    const frac = /^[.,](0+|9+)(?![0-9])/.exec(layout.slice(i));
    if (frac) {
      out += fraction(date, frac[0][0], frac[1]);
      i += frac[0].length;
      continue;
    }
    // `_2006` is a literal underscore followed by the year, not a space-padded day.
    const chunk = layout.startsWith('_2006', i) ? undefined : CHUNKS.find((c) => layout.startsWith(c, i));
    if (chunk === undefined) {
      out += layout[i++];
      continue;
    }
    out += value(date, chunk);
    i += chunk.length;
  }
  return out;
}

function value(d: Date, chunk: string): string {
  const two = (n: number): string => String(n).padStart(2, '0');
  const hour12 = d.getUTCHours() % 12 === 0 ? 12 : d.getUTCHours() % 12;
  const yearDay = Math.floor((Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) - Date.UTC(d.getUTCFullYear(), 0, 1)) / 86_400_000) + 1;
  switch (chunk) {
    case 'January': return LONG_MONTHS[d.getUTCMonth()];
    case 'Jan': return LONG_MONTHS[d.getUTCMonth()].slice(0, 3);
    case 'Monday': return LONG_DAYS[d.getUTCDay()];
    case 'Mon': return LONG_DAYS[d.getUTCDay()].slice(0, 3);
    case 'MST': return 'UTC';
    case '2006': return String(d.getUTCFullYear()).padStart(4, '0');
    case '06': return two(d.getUTCFullYear() % 100);
    case '01': return two(d.getUTCMonth() + 1);
    case '1': return String(d.getUTCMonth() + 1);
    case '02': return two(d.getUTCDate());
    case '2': return String(d.getUTCDate());
    case '_2': return String(d.getUTCDate()).padStart(2, ' ');
    case '002': return String(yearDay).padStart(3, '0');
    case '__2': return String(yearDay).padStart(3, ' ');
    case '15': return two(d.getUTCHours());
    case '03': return two(hour12);
    case '3': return String(hour12);
    case '04': return two(d.getUTCMinutes());
    case '4': return String(d.getUTCMinutes());
    case '05': return two(d.getUTCSeconds());
    case '5': return String(d.getUTCSeconds());
    case 'PM': return d.getUTCHours() >= 12 ? 'PM' : 'AM';
    case 'pm': return d.getUTCHours() >= 12 ? 'pm' : 'am';
    default:
      // Zone offsets: UTC is "Z" in the ISO 8601 (Z...) forms and a zero offset in the numeric ones.
      if (chunk.startsWith('Z')) return 'Z';
      return chunk.replace(/^-/, '+').replace(/\d/g, '0');
  }
}

/** `.000` keeps every digit; `.999` drops trailing zeros, and the separator too if nothing is left. */
function fraction(d: Date, separator: string, digits: string): string {
  const nanos = String(d.getUTCMilliseconds() * 1_000_000).padStart(9, '0').slice(0, digits.length);
  if (digits[0] === '0') return separator + nanos;
  const trimmed = nanos.replace(/0+$/, '');
  return trimmed === '' ? '' : separator + trimmed;
}
