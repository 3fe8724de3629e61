import { describe, expect, it } from 'vitest';
import { MAX_DURATION_SECONDS, MAX_DURATION_TEXT, formatGoDuration, parseDurationSecond } from '../../src/core/durations.ts';

describe('parseDurationSecond', () => {
  it.each([
    [90, 90], ['90', 90], ['', 0], [null, 0], ['7d', 604_800], ['1h30m', 5400], ['1.5h', 5400], ['768h', 2_764_800],
    ['500ms', 0], ['2m', 120], ['-5', -5], ['+5d', 432_000], ['+90', 90], [' 90 ', 90],
  ])('"%s" is %i seconds', (input, seconds) => {
    expect(parseDurationSecond(input)).toBe(seconds);
  });

  it.each([['-0'], ['-0s'], ['-0d'], [-0]])('"%s" is zero, not negative zero', (input) => {
    expect(Object.is(parseDurationSecond(input), 0)).toBe(true);
  });

  it.each([
    ['1d12h', /unknown unit in duration/], ['1.5', /missing unit/], ['soon', /invalid duration/], [{}, /could not parse duration/],
    ['1e400', /unknown unit in duration/], ['1e400s', /unknown unit in duration/], [true, /could not parse duration/], [[60], /could not parse duration/],
    [Number.POSITIVE_INFINITY, /could not parse duration/], [Number.NaN, /could not parse duration/],
  ])('"%s" is refused', (input, message) => {
    expect(() => parseDurationSecond(input)).toThrow(message);
  });

  describe('"every duration has a documented maximum and a value past it is refused"', () => {
    it('the maximum is 100 years of 365 days', () => {
      expect(MAX_DURATION_SECONDS).toBe(3_153_600_000);
      expect(parseDurationSecond(MAX_DURATION_SECONDS)).toBe(MAX_DURATION_SECONDS);
      expect(parseDurationSecond('36500d')).toBe(MAX_DURATION_SECONDS);
      expect(parseDurationSecond('876000h')).toBe(MAX_DURATION_SECONDS);
    });

    it.each([
      [MAX_DURATION_SECONDS + 1], [-MAX_DURATION_SECONDS - 1], [1e308], [-1e308], [2 ** 63], ['3153600001'], ['99999999999999999999'],
      ['36501d'], ['99999999999h'], ['9999999999999999999h'], ['876000h1s'], ['-99999999999h'], ['9'.repeat(60)], [`${'9'.repeat(60)}h`],
    ])('%s is longer than the maximum', (input) => {
      expect(() => parseDurationSecond(input)).toThrow('longer than the maximum of 3153600000 seconds (876000h0m0s)');
    });

    it('a digit string that spells Infinity is past the maximum, not a number', () => {
      expect(() => parseDurationSecond('9'.repeat(MAX_DURATION_TEXT))).toThrow(/longer than the maximum/);
    });
  });

  it('"the input length is bounded before the parser loops": a long string is refused by its length, without echoing it', () => {
    for (const input of ['1h'.repeat(50_000), '1'.repeat(1_000_000), `${' '.repeat(MAX_DURATION_TEXT)}1s`]) {
      let message = '';
      try {
        parseDurationSecond(input);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toBe(`a duration is at most ${MAX_DURATION_TEXT} characters`);
    }
    expect(parseDurationSecond(`${' '.repeat(MAX_DURATION_TEXT - 4)}1h1s`)).toBe(3601);
  });

  it('an error never quotes the value (it may be a secret sent in the wrong field)', () => {
    expect(() => parseDurationSecond('1x\u0000')).toThrow('unknown unit in duration (units: ns, us, µs, μs, ms, s, m, h)');
  });
});

describe('formatGoDuration', () => {
  it.each([[0, '0s'], [59, '59s'], [3600, '1h0m0s'], [5400, '1h30m0s'], [90, '1m30s']])('%i seconds is "%s"', (s, text) => {
    expect(formatGoDuration(s)).toBe(text);
  });
});
