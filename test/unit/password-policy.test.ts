import { describe, expect, it } from 'vitest';
import {
  DEFAULT_PASSWORD_POLICY,
  generatePassword,
  parsePasswordPolicy,
  PolicyParseError,
} from '../../src/core/policy/password-policy.ts';

const charsetRule = (charset: string, minChars?: number) =>
  `rule "charset" {\n  charset = ${JSON.stringify(charset)}\n${minChars === undefined ? '' : `  min-chars = ${minChars}\n`}}\n`;
const policyText = (length: number, ...rules: string[]) => `length = ${length}\n${rules.join('')}`;
const count = (s: string, chars: string) => Array.from(s).filter((c) => chars.includes(c)).length;

/** A byte source that replays `bytes` in order, cycling. */
const replay = (bytes: number[]) => {
  let at = 0;
  return (n: number) => Buffer.from(Array.from({ length: n }, () => bytes[at++ % bytes.length]));
};

describe('parsePasswordPolicy', () => {
  const hcl = policyText(20, charsetRule('abcdefghijklmnopqrstuvwxyz', 1), charsetRule('0123456789', 2), charsetRule('-', 1));

  it.each([
    ['HCL', hcl],
    ['base64 of HCL', Buffer.from(hcl).toString('base64')],
    ['JSON with a rule list', JSON.stringify({
      length: 20,
      rule: [
        { charset: { charset: 'abcdefghijklmnopqrstuvwxyz', 'min-chars': 1 } },
        { charset: { charset: '0123456789', 'min-chars': 2 } },
        { charset: { charset: '-', 'min-chars': 1 } },
      ],
    })],
  ])('reads length and charset rules from %s', (_name, text) => {
    const policy = parsePasswordPolicy(text);
    expect(policy.length).toBe(20);
    expect(policy.rules.map((r) => [r.charset.join(''), r.minChars])).toEqual([
      ['abcdefghijklmnopqrstuvwxyz', 1],
      ['0123456789', 2],
      ['-', 1],
    ]);
    expect(policy.charset).toHaveLength(37);
  });

  it('defaults min-chars to 0', () => {
    expect(parsePasswordPolicy(policyText(8, charsetRule('ab'))).rules[0].minChars).toBe(0);
  });

  it('de-duplicates each rule and the union alphabet, by code point', () => {
    const policy = parsePasswordPolicy(policyText(8, charsetRule('aabbc😀😀'), charsetRule('cdd😀')));
    expect(policy.rules.map((r) => r.charset)).toEqual([['a', 'b', 'c', '😀'], ['c', 'd', '😀']]);
    expect(policy.charset).toEqual(['a', 'b', 'c', '😀', 'd']);
  });

  it.each([
    [3, false],
    [4, true],
    [100, true],
    [101, false],
  ])('length %i within 4–100: %s', (length, ok) => {
    const parse = () => parsePasswordPolicy(policyText(length, charsetRule('abc')));
    if (ok) expect(parse().length).toBe(length);
    else expect(parse).toThrowError(new PolicyParseError('passwords must be between 4 and 100 characters'));
  });

  const tooLong = Array.from({ length: 257 }, (_, i) => String.fromCodePoint(0x4e00 + i)).join('');
  it.each([
    ['HCL syntax error', 'length = 20\nrule "charset" {', 'invalid password policy: unable to decode: line 2, column 17: expected "}" to close the block opened at line 2, found end of input'],
    ['missing length', charsetRule('abc'), 'invalid password policy: length must be > 0'],
    ['zero length', policyText(0, charsetRule('abc')), 'invalid password policy: length must be > 0'],
    ['negative length and no rules', 'length = -1', 'invalid password policy: length must be > 0; no charset specified'],
    ['min-chars exceeding length', policyText(10, charsetRule('abc', 6), charsetRule('123', 5)),
      'invalid password policy: specified rules require at least 11 characters but 10 is specified'],
    ['no rule', 'length = 20', 'invalid password policy: no charset specified'],
    ['only empty charsets', policyText(20, charsetRule('')), 'invalid password policy: no charset specified'],
    ['non-printable character', policyText(20, charsetRule('ab\tc')), 'invalid password policy: non-printable character in charset'],
    ['charset over 256 characters', policyText(20, charsetRule(tooLong)), 'invalid password policy: charset is too long: limited to 256 characters'],
    ['unknown rule type', 'length = 20\nrule "regex" { pattern = "x" }', 'invalid password policy: unable to parse rule regex: unrecognized rule type regex'],
    ['lone surrogate (invalid UTF-8)', 'length = 20\nrule "charset" { charset = "ab\\ud800" }', 'invalid password policy: rule "charset" on line 2: charset is not valid UTF-8'],
    ['unknown top-level key', 'lenght = 20', 'invalid password policy: invalid key "lenght" on line 1'],
    ['duplicate length', 'length = 20\nlength = 30', 'invalid password policy: duplicate key "length" on line 2'],
    ['length as a string', 'length = "20"', 'invalid password policy: length on line 1 must be an integer'],
    ['fractional length', 'length = 20.5', 'invalid password policy: length on line 1 must be an integer'],
    ['unknown rule key', 'length = 20\nrule "charset" {\n  charset = "ab"\n  min_chars = 1\n}', 'invalid password policy: rule "charset" on line 2: invalid key "min_chars" on line 4'],
    ['duplicate rule key', 'length = 20\nrule "charset" {\n  charset = "ab"\n  charset = "cd"\n}', 'invalid password policy: rule "charset" on line 2: duplicate key "charset" on line 4'],
    ['charset not a string', 'length = 20\nrule "charset" { charset = ["a"] }', 'invalid password policy: rule "charset" on line 2: charset on line 2 must be a string'],
    ['min-chars not an integer', 'length = 20\nrule "charset" {\n  charset = "ab"\n  min-chars = "1"\n}', 'invalid password policy: min-chars on line 4 must be an integer'],
    ['negative min-chars', policyText(20, charsetRule('ab', -1)), 'invalid password policy: rule "charset" on line 2: min-chars must not be negative'],
    ['rule with two labels', 'length = 20\nrule "charset" "x" {}', 'invalid password policy: "rule" on line 2: expected one label, found 2'],
  ])('rejects %s', (_name, text, message) => {
    expect(() => parsePasswordPolicy(text)).toThrowError(new PolicyParseError(message));
  });

  it('errors are PolicyParseError with 400 intent', () => {
    const err = (() => {
      try {
        parsePasswordPolicy('length = 0');
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(PolicyParseError);
    expect(err).toMatchObject({ status: 400 });
  });

  it.each([
    ['an empty charset that must supply characters', policyText(20, charsetRule('abc'), charsetRule('', 1))],
    ['rules that fit the length but are astronomically unlikely together',
      policyText(20, charsetRule('abcdefghijklmnopqrstuvwxyz', 1), charsetRule('0', 19))],
  ])('rejects impossible rules found by a test generation: %s', (_name, text) => {
    expect(() => parsePasswordPolicy(text)).toThrowError(
      new PolicyParseError('unable to construct test password from provided policy: are the rules impossible?'),
    );
  });
});

describe('generatePassword', () => {
  it('satisfies every min-chars rule and draws only from the charset, over many draws', () => {
    const lower = 'abcdefghijklmnopqrstuvwxyz';
    const digits = '0123456789';
    const policy = parsePasswordPolicy(policyText(12, charsetRule(lower, 2), charsetRule(digits, 3), charsetRule('!-', 1)));
    for (let i = 0; i < 2000; i++) {
      const password = generatePassword(policy);
      expect(password).toMatch(/^[a-z0-9!-]{12}$/);
      expect(count(password, lower)).toBeGreaterThanOrEqual(2);
      expect(count(password, digits)).toBeGreaterThanOrEqual(3);
      expect(count(password, '!-')).toBeGreaterThanOrEqual(1);
    }
  });

  it('counts length in code points, not UTF-16 units', () => {
    const password = generatePassword(parsePasswordPolicy(policyText(10, charsetRule('😀é'))));
    expect(Array.from(password)).toHaveLength(10);
  });

  it('maps bytes uniformly: bytes beyond the last whole multiple of the alphabet are rejected', () => {
    // 3 characters: 255 = 3·85 is the limit, so byte 255 is skipped rather than folded onto "a".
    const policy = parsePasswordPolicy(policyText(4, charsetRule('abc')));
    expect(generatePassword(policy, replay([255, 0, 1, 2, 255, 3]))).toBe('abca');
  });

  it('redraws whole candidates until every rule is met', () => {
    const policy = parsePasswordPolicy(policyText(4, charsetRule('ab'), charsetRule('b', 1)));
    // First candidate "aaaa" fails the rule, the second "aaab" passes.
    expect(generatePassword(policy, replay([0, 0, 0, 0, 0, 0, 0, 1]))).toBe('aaab');
  });

  it('gives up with an error when the byte source never satisfies the rules', () => {
    const policy = parsePasswordPolicy(policyText(4, charsetRule('ab'), charsetRule('b', 1)));
    expect(() => generatePassword(policy, () => Buffer.alloc(4))).toThrow(/^timed out generating password/);
  });

  it('does not hang on a byte source that only yields rejected bytes', () => {
    const policy = parsePasswordPolicy(policyText(4, charsetRule('abc')));
    expect(() => generatePassword(policy, (n) => Buffer.alloc(n, 255))).toThrow(/^timed out generating password/);
  });

  it('draws each character about equally often', () => {
    const policy = parsePasswordPolicy(policyText(100, charsetRule('abcde')));
    const tally = new Map<string, number>();
    for (let i = 0; i < 200; i++) for (const c of generatePassword(policy)) tally.set(c, (tally.get(c) ?? 0) + 1);
    // 20 000 draws, 4 000 expected each; ±10% is more than 12 standard deviations.
    for (const c of 'abcde') expect(Math.abs(tally.get(c)! - 4000)).toBeLessThan(400);
  });
});

describe('DEFAULT_PASSWORD_POLICY', () => {
  it('is 64 characters from A–Z a–z 0–9 with one of each class required', () => {
    expect(DEFAULT_PASSWORD_POLICY.length).toBe(64);
    expect([...DEFAULT_PASSWORD_POLICY.charset].sort().join('')).toBe('0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz');
    expect(DEFAULT_PASSWORD_POLICY.rules.map((r) => [r.charset.join(''), r.minChars])).toEqual([
      ['ABCDEFGHIJKLMNOPQRSTUVWXYZ', 1],
      ['abcdefghijklmnopqrstuvwxyz', 1],
      ['0123456789', 1],
    ]);
  });

  it('is frozen so no caller can weaken it', () => {
    expect(Object.isFrozen(DEFAULT_PASSWORD_POLICY)).toBe(true);
    expect(Object.isFrozen(DEFAULT_PASSWORD_POLICY.rules)).toBe(true);
    expect(Object.isFrozen(DEFAULT_PASSWORD_POLICY.charset)).toBe(true);
    expect(Object.isFrozen(DEFAULT_PASSWORD_POLICY.rules[0].charset)).toBe(true);
  });

  it('generates passwords containing every class', () => {
    for (let i = 0; i < 200; i++) {
      const password = generatePassword(DEFAULT_PASSWORD_POLICY);
      expect(password).toMatch(/^[A-Za-z0-9]{64}$/);
      expect(password).toMatch(/[A-Z]/);
      expect(password).toMatch(/[a-z]/);
      expect(password).toMatch(/[0-9]/);
    }
  });
});
