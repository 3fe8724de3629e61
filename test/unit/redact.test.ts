import { describe, expect, it } from 'vitest';
import { MIN_SUBSTRING_VALUE, replaceValues } from '../../src/lib/redact.ts';

const R = '[redacted]';

describe('replaceValues', () => {
  it.each([
    // [secret, text, expected]
    ['a one-letter secret inside a word is left (it hides nothing there)', 'x', 'bind as cn=admin,dc=example', 'bind as cn=admin,dc=example'],
    ['a one-letter secret standing alone is replaced', 'x', 'password "x" refused', `password "${R}" refused`],
    ['a short secret at the start and end of the text', 'ab', 'ab: refused ab', `${R}: refused ${R}`],
    ['a short secret next to a digit is inside a word', 'ab', 'ab1 1ab', 'ab1 1ab'],
    ['a short secret with non-Latin letters around it is inside a word', 'ab', 'éabé', 'éabé'],
    ['a short secret of regular-expression syntax is matched literally', '.*', 'a .* b aXb', `a ${R} b aXb`],
    ['a short secret of non-word characters standing alone', '$(x)', 'got $(x) here', `got ${R} here`],
    [`a secret of ${MIN_SUBSTRING_VALUE} characters is replaced inside words too`, 'hunter22', 'xhunter22y', `x${R}y`],
    ['a long secret anywhere', 'Tr0ub4dor-canary', 'dn=Tr0ub4dor-canary,dc=x', `dn=${R},dc=x`],
  ])('"a secret is never told, and a short one never shreds the text": %s', (_name, secret, text, expected) => {
    expect(replaceValues(text, [[secret, R]])).toBe(expected);
  });

  it('"one value inside another is fully hidden": the longest is replaced first', () => {
    expect(replaceValues('cn=Tr0ub4dor-canary@example.test', [['Tr0ub4dor-canary', 'the configured binddn'], ['cn=Tr0ub4dor-canary@example.test', 'the UPN']])).toBe('the UPN');
  });

  it('"the first name given to a value wins": a secret listed first stays redacted when a config field holds the same text', () => {
    expect(replaceValues('bind as Tr0ub4dor-canary', [['Tr0ub4dor-canary', R], ['Tr0ub4dor-canary', 'the configured binddn']])).toBe(`bind as ${R}`);
  });

  it('an empty value replaces nothing', () => {
    expect(replaceValues('text', [['', R]])).toBe('text');
  });
});
