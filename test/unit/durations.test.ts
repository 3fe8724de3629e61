import { describe, expect, it } from 'vitest';
import { formatGoDuration, parseDurationSecond } from '../../src/core/durations.ts';

describe('parseDurationSecond', () => {
  it.each([
    [90, 90], ['90', 90], ['', 0], [null, 0], ['7d', 604_800], ['1h30m', 5400], ['1.5h', 5400], ['768h', 2_764_800],
    ['500ms', 0], ['2m', 120], ['-5', -5],
  ])('"%s" is %i seconds', (input, seconds) => {
    expect(parseDurationSecond(input)).toBe(seconds);
  });

  it.each([
    ['1d12h', /unknown unit "d"/], ['1.5', /missing unit/], ['soon', /invalid duration/], [{}, /could not parse duration/],
  ])('"%s" is refused', (input, message) => {
    expect(() => parseDurationSecond(input)).toThrow(message);
  });
});

describe('formatGoDuration', () => {
  it.each([[0, '0s'], [59, '59s'], [3600, '1h0m0s'], [5400, '1h30m0s'], [90, '1m30s']])('%i seconds is "%s"', (s, text) => {
    expect(formatGoDuration(s)).toBe(text);
  });
});
