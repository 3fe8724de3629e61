import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MAX_DURATION_SECONDS } from '../../src/core/durations.ts';
import { FIELD_LIMITS, field, validateFields, type Field } from '../../src/core/fields.ts';

/** The value a field decodes `input` to, or the 400 message naming it. */
function decode(def: Field, input: unknown): { value?: unknown; error?: string } {
  const { values, errors } = validateFields({ f: def }, { f: input });
  return errors.length ? { error: errors[0] } : { value: values.f };
}

const refusal = (rule: string) => ({ error: `invalid value for field "f": ${rule}` });

describe('Vault\'s weak decoding of valid values is unchanged', () => {
  it.each([
    [field.string('s'), 12, '12'], [field.string('s'), true, '1'], [field.lowercase('s'), 'ABC', 'abc'],
    [field.bool('b'), 'true', true], [field.bool('b'), 't', true], [field.bool('b'), '', false], [field.bool('b'), 0, false],
    [field.int('i'), '42', 42], [field.int('i'), ' 42 ', 42], [field.int('i'), '', 0], [field.int('i'), '0x1f', 31], [field.int('i'), '-0x10', -16], [field.int('i'), -7, -7],
    [field.duration('d'), '1h', 3600], [field.duration('d'), 90, 90], [field.duration('d'), '7d', 604_800], [field.duration('d'), '', 0],
    [field.commaList('l'), 'a, b ,c', ['a', 'b', 'c']], [field.commaList('l'), '', []], [field.commaList('l'), 5, ['5']], [field.commaList('l'), [' a', 1, true], ['a', '1', 'true']],
    [field.stringList('l'), 'a,b', ['a,b']], [field.stringList('l'), ['x ', 2], ['x', '2']],
    [field.map('m'), { a: { b: 1 } }, { a: { b: 1 } }],
    [field.kvPairs('k'), ['a=1', 'b=x=y'], { a: '1', b: 'x=y' }], [field.kvPairs('k'), { a: 1, b: false }, { a: '1', b: 'false' }],
  ])('%#: %j decodes', (def, input, value) => {
    expect(decode(def, input)).toEqual({ value });
  });

  it('"-0" is the integer zero', () => {
    expect(Object.is(decode(field.int('i'), '-0').value, 0)).toBe(true);
  });
});

describe('"every input has a bound; past it is a 400 naming the field"', () => {
  describe('int: only safe integers, within the field\'s min and max', () => {
    const wide = 'expected an integer from -9007199254740991 to 9007199254740991';
    it.each([
      [1e30, wide], [-1e30, wide], [1e308, wide], [2 ** 63, wide], ['99999999999999999999', wide], ['9007199254740992', wide],
      ['0x20000000000000', wide], ['0xffffffffffffffffffff', wide], [Number.POSITIVE_INFINITY, 'expected an integer'],
      ['NaN', 'expected an integer'], ['1e3', 'expected an integer'], ['12abc', 'expected an integer'], [1.5, 'expected an integer'],
      [true, 'expected an integer'], [[1], 'expected an integer'], [{ a: 1 }, 'expected an integer'],
    ])('%s is refused', (input, rule) => {
      expect(decode(field.int('i'), input)).toEqual(refusal(rule));
    });

    it('the bounds are inclusive and named in the refusal', () => {
      const def = field.int('i', { min: 0, max: 20 });
      expect(decode(def, 0)).toEqual({ value: 0 });
      expect(decode(def, '20')).toEqual({ value: 20 });
      expect(decode(def, 21)).toEqual(refusal('expected an integer from 0 to 20'));
      expect(decode(def, -1)).toEqual(refusal('expected an integer from 0 to 20'));
      expect(decode(field.int('i'), Number.MAX_SAFE_INTEGER)).toEqual({ value: Number.MAX_SAFE_INTEGER });
    });
  });

  describe('duration: at most 100 years, or the field\'s own smaller max; whole, finite, not negative', () => {
    it.each([
      [MAX_DURATION_SECONDS + 1], ['99999999999h'], ['9999999999999999999h'], [1e308], ['99999999999999999999'], ['36501d'],
    ])('%s is past the system maximum', (input) => {
      expect(decode(field.duration('d'), input)).toEqual(refusal('longer than the maximum of 3153600000 seconds (876000h0m0s)'));
    });

    it('a field\'s max is its bound, and can only lower the system one', () => {
      expect(decode(field.duration('d', { max: 3600 }), '1h')).toEqual({ value: 3600 });
      expect(decode(field.duration('d', { max: 3600 }), '1h1s')).toEqual(refusal('longer than the maximum of 3600 seconds (1h0m0s)'));
      expect(decode(field.duration('d', { max: 2 * MAX_DURATION_SECONDS }), MAX_DURATION_SECONDS + 1)).toEqual(refusal('longer than the maximum of 3153600000 seconds (876000h0m0s)'));
    });

    it.each([[1.5, 'expected whole seconds'], [-1, 'a duration cannot be negative'], ['-1h', 'a duration cannot be negative']])('%s is refused', (input, rule) => {
      expect(decode(field.duration('d'), input)).toEqual(refusal(rule));
    });

    it.each([
      [Number.POSITIVE_INFINITY, 'could not parse duration from input'], ['1e400s', 'unknown unit in duration (units: ns, us, µs, μs, ms, s, m, h)'],
      [{ a: 1 }, 'could not parse duration from input'], [[60], 'could not parse duration from input'], [true, 'could not parse duration from input'],
      ['1h'.repeat(50_000), 'a duration is at most 64 characters'],
    ])('%s is refused with the accepted spellings', (input, rule) => {
      expect(decode(field.duration('d'), input)).toEqual(refusal(`${rule} (use integer seconds, a Go duration like "1h30m", or "<n>d")`));
    });
  });

  describe('string: at most 64 KiB unless the field says otherwise', () => {
    it('the default bound is inclusive and the refusal does not echo the value', () => {
      expect(decode(field.string('s'), 'x'.repeat(FIELD_LIMITS.stringLength))).toEqual({ value: 'x'.repeat(FIELD_LIMITS.stringLength) });
      expect(decode(field.string('s'), 'x'.repeat(FIELD_LIMITS.stringLength + 1))).toEqual(refusal('a string longer than the maximum of 65536 characters'));
      expect(decode(field.lowercase('s'), 'X'.repeat(FIELD_LIMITS.stringLength + 1))).toEqual(refusal('a string longer than the maximum of 65536 characters'));
    });

    it('a field may set its own bound, larger or smaller', () => {
      expect(decode(field.string('s', { maxLength: 3 }), 'abcd')).toEqual(refusal('a string longer than the maximum of 3 characters'));
      expect(decode(field.string('s', { maxLength: 1 << 20 }), 'x'.repeat(100_000)).value).toHaveLength(100_000);
    });

    it.each([[[]], [{}], [[['nested']]]])('%j is not a string', (input) => {
      expect(decode(field.string('s'), input)).toEqual(refusal('expected a string'));
    });
  });

  describe('lists: at most 1,000 elements of at most 4,096 characters', () => {
    it.each([[field.commaList('l')], [field.stringList('l')]])('%#: the element count is checked before the elements', (def) => {
      expect(decode(def, Array(FIELD_LIMITS.listItems).fill('a')).value).toHaveLength(1000);
      expect(decode(def, Array(FIELD_LIMITS.listItems + 1).fill({ nested: true }))).toEqual(refusal('more than the maximum of 1000 elements'));
      expect(decode(def, ['x'.repeat(4097)])).toEqual(refusal('an element longer than the maximum of 4096 characters'));
    });

    it('a comma string is split no further than one element past the bound', () => {
      expect(decode(field.commaList('l'), ','.repeat(1_000_000))).toEqual(refusal('more than the maximum of 1000 elements'));
      expect(decode(field.commaList('l', { maxItems: 2 }), 'a,b,c')).toEqual(refusal('more than the maximum of 2 elements'));
    });

    it.each([[[{ a: 1 }]], [[null]], [[['a']]], [{ a: 1 }], [true]])('%j is refused with one message', (input) => {
      const { error } = decode(field.commaList('l'), input);
      expect(error).toMatch(/^invalid value for field "f": expected a list (of strings|or a comma-separated string)$/);
    });
  });

  describe('maps: at most 1,000 keys of at most 4,096 characters', () => {
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
    it.each([[field.map('m')], [field.kvPairs('k')]])('%#: the key count and key length are bounded', (def) => {
      expect(Object.keys(decode(def, many(1000)).value as object)).toHaveLength(1000);
      expect(decode(def, many(1001))).toEqual(refusal('more than the maximum of 1000 keys'));
      expect(decode(def, { ['k'.repeat(4097)]: 'v' })).toEqual(refusal('a key longer than the maximum of 4096 characters'));
    });

    it('a key=value list is counted before it is split', () => {
      expect(decode(field.kvPairs('k'), Array(1001).fill('a=b'))).toEqual(refusal('more than the maximum of 1000 keys'));
      expect(decode(field.kvPairs('k', { maxKeys: 1 }), { a: '1', b: '2' })).toEqual(refusal('more than the maximum of 1 keys'));
    });

    it('a kvPairs value is a string of at most 64 KiB', () => {
      expect(decode(field.kvPairs('k'), { a: 'x'.repeat(FIELD_LIMITS.stringLength + 1) })).toEqual(refusal('a value longer than the maximum of 65536 characters'));
      expect(decode(field.kvPairs('k'), { a: { b: 1 } })).toEqual(refusal('expected a map of strings or a list of key=value strings'));
      expect(decode(field.kvPairs('k'), ['novalue'])).toEqual(refusal('expected key=value pairs'));
    });

    it('a "__proto__" key stays a key and does not replace the prototype', () => {
      const value = decode(field.map('m'), JSON.parse('{"__proto__": {"polluted": true}}')).value as Record<string, unknown>;
      expect(Object.keys(value)).toEqual(['__proto__']);
      expect(Object.getPrototypeOf(value)).toBe(Object.prototype);
      expect((decode(field.kvPairs('k'), ['__proto__=x']).value as Record<string, unknown>)['__proto__']).toBe('x');
    });

    it.each([[[1]], ['a=b'], [7]])('%j is not a map', (input) => {
      expect(decode(field.map('m'), input)).toEqual(refusal('expected a JSON object'));
    });
  });
});

describe('"every string a field returns is well-formed Unicode"', () => {
  it.each([
    [field.string('s'), '\ud800', 'a string'], [field.string('s'), 'a\udc00b', 'a string'], [field.commaList('l'), ['ok', '\ud800'], 'an element'],
    [field.map('m'), { '\ud800': 1 }, 'a key'], [field.kvPairs('k'), { a: 'x\udfff' }, 'a value'],
  ])('%#: a lone surrogate is refused: it has no UTF-8 form', (def, input, what) => {
    expect(decode(def, input)).toEqual(refusal(`${what} that is not well-formed Unicode (a lone surrogate)`));
  });

  it('a surrogate pair is a character like any other', () => {
    expect(decode(field.string('s'), 'a\ud83d\ude00')).toEqual({ value: 'a\ud83d\ude00' });
  });
});

describe('every field says what kind of value it takes', () => {
  it.each([
    [field.string('x'), 'string'], [field.lowercase('x'), 'string'], [field.bool('x'), 'bool'], [field.int('x'), 'int'], [field.duration('x'), 'duration'],
    [field.commaList('x'), 'list'], [field.stringList('x'), 'list'], [field.map('x'), 'map'], [field.kvPairs('x'), 'map'], [field.custom(z.string(), 'x'), 'custom'],
  ])('%#: %s', (def, kind) => {
    expect(def.kind).toBe(kind);
  });
});

describe('validateFields', () => {
  it('reports each rule once however many elements break it', () => {
    const { errors } = validateFields({ l: field.custom(z.array(z.string({ error: 'expected a list of strings' })), 'l') }, { l: Array(500).fill({}) });
    expect(errors).toEqual(['invalid value for field "l": expected a list of strings']);
  });

  it('only own properties of the input are fields', () => {
    const { values, errors } = validateFields({ constructor: field.string('s', { required: true }) }, {});
    expect(errors).toEqual(['missing required field "constructor"']);
    expect(values.constructor).toBeUndefined();
  });
});
