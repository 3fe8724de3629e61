import { describe, expect, it } from 'vitest';
import { Acl } from '../../src/core/policy/acl.ts';
import { DEFAULT_POLICY_HCL, parseAclPolicy, PolicyParseError } from '../../src/core/policy/parse.ts';
import type { Operation } from '../../src/core/policy/acl.ts';
import { decodeIfBase64, HclParseError, parseHcl, toPlain } from '../../src/core/policy/hcl.ts';

const acl = (...texts: string[]) => new Acl(texts.map((t, i) => parseAclPolicy(`p${i}`, t)));
const rule = (path: string, body: string) => `path "${path}" {\n  ${body}\n}\n`;
const caps = (path: string, ...c: string[]) => rule(path, `capabilities = ${JSON.stringify(c)}`);

describe('parseHcl', () => {
  it.each([
    ['double-quoted string with escapes', 'a = "x\\"y\\\\z\\n\\t\\u00e9"', { a: 'x"y\\z\n\té' }],
    ['integers, negatives, floats and hex', 'a = 42\nb = -3\nc = 1.5\nd = 0x1F', { a: 42, b: -3, c: 1.5, d: 31 }],
    ['booleans', 'a = true\nb = false', { a: true, b: false }],
    ['lists with a trailing comma across lines', 'a = [\n  "x",\n  "y",\n]', { a: ['x', 'y'] }],
    ['nested objects and lists', 'a = { k = ["v"], "q" = { n = 1 } }', { a: { k: ['v'], q: { n: 1 } } }],
    ['quoted keys and hyphenated identifiers', '"a b" = 1\nmin-chars = 2', { 'a b': 1, 'min-chars': 2 }],
    ['heredoc keeps text and ends with a newline', 'a = <<EOT\nline 1\n  line 2\nEOT\n', { a: 'line 1\n  line 2\n' }],
    ['indented heredoc strips common indentation', 'a = <<-EOT\n    x\n      y\n    EOT', { a: 'x\n  y\n' }],
    ['hash, slash and block comments', '# one\na = 1 // two\n/* three\n four */ b = 2', { a: 1, b: 2 }],
    ['commas between items of a block', 'a = { x = 1, y = 2 }', { a: { x: 1, y: 2 } }],
    ['JSON document', '{"a": [1, "two", true], "b": {"c": "d"}}', { a: [1, 'two', true], b: { c: 'd' } }],
    ['JSON surrogate pairs recombine', '{"a": "\\ud83d\\ude00"}', { a: '😀' }],
  ])('parses %s', (_name, text, expected) => {
    expect(toPlain(parseHcl(text))).toEqual(expected);
  });

  it('keeps labels of labelled blocks and positions of items', () => {
    const doc = parseHcl('\n  rule "charset" {\n    x = 1\n  }');
    expect(doc.items[0]).toMatchObject({ key: 'rule', labels: ['charset'], line: 2, column: 3 });
    expect(doc.items[0].value).toMatchObject({ type: 'object', items: [{ key: 'x', line: 3, column: 5 }] });
  });

  it.each([
    ['unterminated string', 'a = "abc\nb = 1', 'line 1, column 5: unterminated string (use a heredoc for multi-line text)'],
    ['unterminated block comment', 'a = 1 /* open', 'line 1, column 7: unterminated /* comment'],
    ['unterminated heredoc', 'a = <<EOT\ntext\n', 'line 1, column 5: unterminated heredoc: no line closes it with its marker'],
    ['heredoc without newline after the marker', 'a = <<EOT text', 'line 1, column 5: expected a heredoc marker such as <<EOT followed by a newline'],
    ['unknown escape', 'a = "\\q"', 'line 1, column 6: invalid escape sequence in string'],
    ['short unicode escape', 'a = "\\u12"', 'line 1, column 6: invalid escape sequence in string'],
    ['stray character', 'a = 1\nb = @', 'line 2, column 5: unexpected character'],
    ['number with a unit', 'ttl = 30m', 'line 1, column 7: invalid number (quote values that carry units, such as "30m")'],
    ['key without value', 'a', 'line 1, column 2: expected "=" or "{" after the key on line 1, found end of input'],
    ['label without block', 'path "x" = 1', 'line 1, column 10: expected "{" to open the block of the key on line 1, found "="'],
    ['unclosed block', 'path "x" {\n a = 1\n', 'line 3, column 1: expected "}" to close the block opened at line 1, found end of input'],
    ['list items without commas', 'a = ["x" "y"]', 'line 1, column 10: expected "," or "]" in the list opened at line 1, found a string'],
    ['bare identifier as value', 'a = read', 'line 1, column 5: expected a value (quoted string, number, true/false, list or object), found an identifier'],
    ['null', '{"a": null}', 'line 1, column 7: null is not supported; expected a value, found an identifier'],
    ['stray closing brace', 'a = 1 }', 'line 1, column 7: expected a key (identifier or quoted string), found "}"'],
    ['JSON trailing comma in list', '{"a": [1,]}', 'line 1, column 10: expected a value after "," (JSON has no trailing commas), found "]"'],
    ['JSON unquoted key', '{a: 1}', 'line 1, column 2: expected a quoted key in JSON object, found an identifier'],
    ['JSON "=" instead of ":"', '{"a" = 1}', 'line 1, column 6: expected ":" after JSON key "a", found "="'],
    ['JSON missing comma', '{"a": 1 "b": 2}', 'line 1, column 9: expected "," or "}" in the JSON object opened at line 1, found a string'],
    ['text after a JSON document', '{"a": 1} x', 'line 1, column 10: expected end of input, found an identifier'],
  ])('rejects %s', (_name, text, message) => {
    const err = (() => {
      try {
        parseHcl(text);
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(HclParseError);
    expect(err).toBeInstanceOf(PolicyParseError);
    expect((err as Error).message).toBe(message);
  });
});

describe('decodeIfBase64', () => {
  it.each([
    ['base64 of text is decoded', Buffer.from('path "a" {}').toString('base64'), 'path "a" {}'],
    ['wrapped base64 lines are decoded', Buffer.from('x'.repeat(60)).toString('base64').replace(/(.{40})/, '$1\n'), 'x'.repeat(60)],
    ['HCL is left alone', 'path "a" { capabilities = ["read"] }', 'path "a" { capabilities = ["read"] }'],
    ['base64 that is not UTF-8 is left alone', Buffer.from([0xff, 0xfe, 0xfd]).toString('base64'), '//79'],
  ])('%s', (_name, input, expected) => {
    expect(decodeIfBase64(input)).toBe(expected);
  });
});

describe('parseAclPolicy', () => {
  const hcl = `
# comment
name = "ignored"
path "/secret/data/*" {
  capabilities = ["read", "list", "read",]
}
path "secret/+/config" {
  policy = "write"
  allowed_parameters = {
    "TTL" = ["1h", "2h"]
    "any" = []
  }
  denied_parameters { "admin" = [] }
  required_parameters = ["Name"]
  min_wrapping_ttl = "1m"
  max_wrapping_ttl = 3600
  comment = "ported from Vault"
}
`;

  it('parses HCL blocks into rules (leading "/" stripped, keys lower-cased, legacy policy mapped)', () => {
    const p = parseAclPolicy('dev', hcl);
    expect(p.name).toBe('dev');
    expect(p.raw).toBe(hcl);
    expect(p.paths).toEqual([
      {
        path: 'secret/data/*', capabilities: ['read', 'list'], allowedParameters: new Map(), deniedParameters: new Map(),
        requiredParameters: [], minWrappingTtl: 0, maxWrappingTtl: 0, subscribeEventTypes: [],
      },
      {
        path: 'secret/+/config', capabilities: ['create', 'read', 'update', 'delete', 'list'],
        allowedParameters: new Map<string, unknown[]>([['ttl', ['1h', '2h']], ['any', []]]),
        deniedParameters: new Map<string, unknown[]>([['admin', []]]),
        requiredParameters: ['name'], minWrappingTtl: 60, maxWrappingTtl: 3600, subscribeEventTypes: [],
      },
    ]);
  });

  it.each([
    ['JSON object form', '{"path": {"secret/*": {"capabilities": ["read"]}, "kv/*": {"policy": "deny"}}}'],
    ['JSON list form', '{"path": [{"secret/*": {"capabilities": ["read"]}}, {"kv/*": {"policy": "deny"}}]}'],
    ['HCL map form', 'path = { "secret/*" = { capabilities = ["read"] }, "kv/*" = { policy = "deny" } }'],
    ['base64 of HCL', Buffer.from('path "secret/*" { capabilities = ["read"] }\npath "kv/*" { policy = "deny" }').toString('base64')],
  ])('accepts the %s', (_name, text) => {
    expect(parseAclPolicy('p', text).paths.map((r) => [r.path, r.capabilities])).toEqual([
      ['secret/*', ['read']],
      ['kv/*', ['deny']],
    ]);
  });

  it.each([
    ['deny', ['deny']],
    ['read', ['read', 'list']],
    ['write', ['create', 'read', 'update', 'delete', 'list']],
    ['sudo', ['create', 'read', 'update', 'delete', 'list', 'sudo']],
  ])('maps legacy policy = "%s"', (legacy, expected) => {
    expect(parseAclPolicy('p', rule('a', `policy = "${legacy}"`)).paths[0].capabilities).toEqual(expected);
  });

  it('deny in a block discards the other capabilities of that block', () => {
    expect(parseAclPolicy('p', caps('a', 'read', 'deny', 'update')).paths[0].capabilities).toEqual(['deny']);
  });

  it.each([
    ['"90" as seconds', '"90"', 90],
    ['a number as seconds', '120', 120],
    ['Go duration', '"1h30m"', 5400],
    ['whole days', '"2d"', 172_800],
    ['empty string as unset', '""', 0],
  ])('reads min_wrapping_ttl given %s', (_name, value, seconds) => {
    expect(parseAclPolicy('p', rule('a', `min_wrapping_ttl = ${value}`)).paths[0].minWrappingTtl).toBe(seconds);
  });

  it('accepts a policy with no paths', () => {
    expect(parseAclPolicy('p', '# nothing yet\n').paths).toEqual([]);
  });

  it.each([
    ['empty text', '  \n', "'policy' parameter not supplied or empty"],
    ['HCL syntax error, with line and column', 'path "a" {\n  capabilities = ["read"\n}',
      'failed to parse policy: line 3, column 1: expected "," or "]" in the list opened at line 2, found "}"'],
    ['invalid capability', caps('secret/*', 'read', 'reed'), 'failed to parse policy: path block on line 1: invalid capability on line 2'],
    ['invalid legacy policy', rule('a', 'policy = "admin"'), 'failed to parse policy: path block on line 1: invalid policy on line 2'],
    ['non-string legacy policy', rule('a', 'policy = 1'), 'failed to parse policy: path block on line 1: invalid policy on line 2'],
    ['"+*" wildcard', caps('/secret/+*', 'read'), `failed to parse policy: path block on line 1: invalid use of wildcards ('+*' is forbidden)`],
    ['unknown top-level keys, all named by line', 'paths "a" {}\nfoo = 1', 'failed to parse policy: invalid key on line 1; invalid key on line 2'],
    ['unknown path key', 'path "a" {\n  capabilities = []\n  capability = ["read"]\n}',
      'failed to parse policy: path block on line 1: invalid key on line 3'],
    ['Enterprise-only path key', rule('a', 'mfa_methods = ["totp"]'), 'failed to parse policy: path block on line 1: "mfa_methods" on line 2 is not supported by Strongroom'],
    ['duplicate path key', 'path "a" {\n  capabilities = ["read"]\n  capabilities = ["list"]\n}',
      'failed to parse policy: path block on line 1: duplicate key "capabilities" on line 3'],
    ['capabilities not a list', rule('a', 'capabilities = "read"'), 'failed to parse policy: path block on line 1: capabilities on line 2 must be a list of strings'],
    ['capabilities with a non-string', rule('a', 'capabilities = ["read", 1]'), 'failed to parse policy: path block on line 1: capabilities on line 2 must be a list of strings'],
    ['required_parameters not a list', rule('a', 'required_parameters = "x"'), 'failed to parse policy: path block on line 1: required_parameters on line 2 must be a list of strings'],
    ['allowed_parameters not a map', rule('a', 'allowed_parameters = ["ttl"]'),
      'failed to parse policy: path block on line 1: allowed_parameters on line 2 must be a map of parameter name to a list of values'],
    ['allowed_parameters value not a list', rule('a', 'allowed_parameters = { ttl = "1h" }'),
      'failed to parse policy: path block on line 1: allowed_parameters entry on line 2 must be a list of values (an empty list allows any value)'],
    ['denied_parameters key listed twice', rule('a', 'denied_parameters = { ttl = [], TTL = [] }'),
      'failed to parse policy: path block on line 1: denied_parameters entry on line 2 names a parameter listed before'],
    ['labelled value', rule('a', 'capabilities "x" { }'), 'failed to parse policy: path block on line 1: "capabilities" on line 2 takes a value, not a labelled block'],
    ['bad duration unit', rule('a', 'min_wrapping_ttl = "5x"'), 'failed to parse policy: path block on line 1: error parsing min_wrapping_ttl: time: unknown unit in duration (units: ns, us, µs, μs, ms, s, m, h)'],
    ['duration without unit', rule('a', 'max_wrapping_ttl = "1.5"'), 'failed to parse policy: path block on line 1: error parsing max_wrapping_ttl: time: missing unit in duration'],
    ['duration that is not a duration', rule('a', 'max_wrapping_ttl = "h"'), 'failed to parse policy: path block on line 1: error parsing max_wrapping_ttl: time: invalid duration'],
    ['duration of the wrong type', rule('a', 'max_wrapping_ttl = [1]'), 'failed to parse policy: path block on line 1: error parsing max_wrapping_ttl: could not parse duration from input'],
    ['negative duration', rule('a', 'min_wrapping_ttl = "-5m"'), 'failed to parse policy: path block on line 1: min_wrapping_ttl on line 2 must not be negative'],
    ['max_wrapping_ttl below min_wrapping_ttl', rule('a', 'min_wrapping_ttl = "1h"\nmax_wrapping_ttl = "1m"'),
      'failed to parse policy: path block on line 1: max_wrapping_ttl cannot be less than min_wrapping_ttl'],
    ['comment that is not a string', rule('a', 'comment = 1'), 'failed to parse policy: path block on line 1: comment on line 2 must be a string'],
    ['name that is not a string', 'name = 1', 'failed to parse policy: "name" on line 1 must be a string'],
    ['two labels on a path block', 'path "a" "b" {}', 'failed to parse policy: "path" on line 1: expected one label, found 2'],
    ['path block that is not a block', '{"path": {"a": "read"}}', 'failed to parse policy: path block on line 1: expected a block body'],
    ['path without a label', 'path = ["a"]', 'failed to parse policy: "path" on line 1: expected path "<label>" { ... } blocks'],
  ])('rejects %s', (_name, text, message) => {
    expect(() => parseAclPolicy('p', text)).toThrowError(new PolicyParseError(message));
    try {
      parseAclPolicy('p', text);
    } catch (err) {
      expect(err).toBeInstanceOf(PolicyParseError);
      expect(err).toMatchObject({ status: 400 });
    }
  });
});

describe('parseAclPolicy errors name a line, never the text (docs/security.md, class 3)', () => {
  // A secret pasted in the wrong place of a policy: as a path label, a key, a parameter name.
  const secret = 'Tr0ub4dor-acl-canary';
  it.each([
    ['a label with "+*"', caps(`${secret}+*`, 'read')],
    ['a label whose block is not a block', `{"path": {"${secret}": "read"}}`],
    ['a label whose block has an invalid capability', caps(secret, 'reed')],
    ['an unknown top-level key', `${secret} = 1`],
    ['an unknown key in a path block', rule('a', `${secret} = ["read"]`)],
    ['a parameter name whose value is not a list', rule(secret, `allowed_parameters = { "${secret}" = "x" }`)],
    ['a parameter name listed twice', rule(secret, `denied_parameters = { "${secret}" = [], "${secret.toUpperCase()}" = [] }`)],
    ['a label whose duration is bad', rule(secret, 'min_wrapping_ttl = "5x"')],
  ])('%s', (_name, text) => {
    let message = '';
    try {
      parseAclPolicy('p', text);
    } catch (err) {
      message = (err as Error).message;
    }
    expect(message).toMatch(/^failed to parse policy: .*line \d/);
    expect(message.toLowerCase()).not.toContain(secret.toLowerCase());
  });
});

type Case = [name: string, path: string, op: Operation, allowed: boolean];

describe('Acl.allowOperation', () => {
  // Each case asked twice of one ACL: the second answer comes from what it kept of the first (Acl.#nonExact).
  const check = (a: Acl, cases: Case[]) => {
    for (let round = 0; round < 2; round++) {
      for (const [name, path, op, allowed] of cases) {
        expect(a.allowOperation(path, op).allowed, `${name}: ${op} ${path} (asked ${round + 1} time(s))`).toBe(allowed);
      }
    }
  };

  it('exact rule beats globs and is not unioned with them', () => {
    check(acl(caps('secret/foo', 'read'), caps('secret/*', 'update', 'read')), [
      ['exact grants read', 'secret/foo', 'read', true],
      ['exact does not inherit update from the glob', 'secret/foo', 'update', false],
      ['glob grants update elsewhere', 'secret/bar', 'update', true],
      ['exact does not match a longer path', 'secret/foo/bar', 'update', true],
    ]);
  });

  it('prefix glob matches any suffix, including none, and longest prefix wins among prefixes', () => {
    check(acl(caps('secret/*', 'read'), caps('secret/app*', 'deny')), [
      ['empty remainder', 'secret/', 'read', true],
      ['deep path', 'secret/x/y/z', 'read', true],
      ['longer prefix', 'secret/app/config', 'read', false],
      ['longer prefix without slash', 'secret/apple', 'read', false],
      ['outside the prefix', 'secrets/x', 'read', false],
    ]);
  });

  it('"*" in the middle of a pattern is a literal character, as in Vault', () => {
    check(acl(caps('secret/*/x', 'read')), [
      ['not a glob', 'secret/a/x', 'read', false],
      ['literal match', 'secret/*/x', 'read', true],
    ]);
  });

  it('"+" matches exactly one segment anywhere', () => {
    check(acl(caps('secret/+/config', 'read'), caps('+/team', 'read'), caps('kv/+/data/*', 'read')), [
      ['one segment', 'secret/app/config', 'read', true],
      ['empty segment', 'secret//config', 'read', true],
      ['two segments', 'secret/a/b/config', 'read', false],
      ['missing segment', 'secret/config', 'read', false],
      ['leading plus', 'ops/team', 'read', true],
      ['plus with trailing glob', 'kv/app/data/x/y', 'read', true],
      ['plus with trailing glob, empty remainder', 'kv/app/data/', 'read', true],
      ['plus with trailing glob, too short', 'kv/app/data', 'read', false],
    ]);
  });

  // Each pair is chosen so that every earlier priority rule ties and only the named one decides.
  it.each([
    ['1: the first wildcard appearing later wins', 'secret/+/config', 'secret/app/*', 'secret/app/config'],
    ['1: later wildcard wins even against a longer pattern', 'secret/+/very/long/path', 'secret/app/*', 'secret/app/very/long/path'],
    ['2: a pattern not ending in "*" beats one that does', 'secret/*', 'secret/+', 'secret/foo'],
    ['2: same, with both using "+"', 'secret/+/config*', 'secret/+/config', 'secret/a/config'],
    ['3: fewer "+" segments win', 'secret/+/+', 'secret/+/b', 'secret/a/b'],
    ['4: the longer pattern wins', 'secret/+/a*', 'secret/+/ab*', 'secret/x/abc'],
    ['5: the lexicographically larger pattern wins', 'secret/+/+/y', 'secret/+/x/+', 'secret/a/x/y'],
  ])('priority rule %s', (_name, loser, winner, path) => {
    // Both orders of policy, so neither insertion order nor policy order decides.
    for (const a of [acl(caps(loser, 'deny'), caps(winner, 'read')), acl(caps(winner, 'read'), caps(loser, 'deny'))]) {
      expect(a.allowOperation(path, 'read').allowed).toBe(true);
    }
    expect(acl(caps(loser, 'read'), caps(winner, 'deny')).allowOperation(path, 'read').allowed).toBe(false);
  });

  it('merges rules with the identical path string across policies: capabilities OR-ed', () => {
    check(acl(caps('secret/*', 'read'), caps('secret/*', 'update')), [
      ['read from one policy', 'secret/a', 'read', true],
      ['update from the other', 'secret/a', 'update', true],
      ['nothing else', 'secret/a', 'delete', false],
    ]);
  });

  it.each([
    ['deny after grant', [caps('secret/*', 'read', 'update'), caps('secret/*', 'deny')]],
    ['deny before grant', [caps('secret/*', 'deny'), caps('secret/*', 'read', 'update')]],
    ['legacy deny', [caps('secret/*', 'read'), rule('secret/*', 'policy = "deny"')]],
  ])('deny wins on the same path string (%s)', (_name, texts) => {
    const a = acl(...texts);
    expect(a.allowOperation('secret/a', 'read')).toEqual({ allowed: false, sudo: false });
    expect(a.capabilities('secret/a')).toEqual(['deny']);
  });

  it('deny on one path string does not leak into a different, more specific one', () => {
    check(acl(caps('secret/*', 'deny'), caps('secret/open', 'read')), [
      ['exact rule still applies', 'secret/open', 'read', true],
      ['glob denies the rest', 'secret/closed', 'read', false],
    ]);
  });

  it('list on "foo/" falls back to the rule on "foo" (exact, then non-exact)', () => {
    check(acl(caps('foo', 'list'), caps('team/+', 'list', 'read')), [
      ['list with trailing slash uses the exact rule', 'foo/', 'list', true],
      ['read does not get the fallback', 'foo/', 'read', false],
      ['list "team/x/" retries "team/x" against "+"', 'team/x/', 'list', true],
      ['read "team/x/" has no fallback', 'team/x/', 'read', false],
    ]);
  });

  it('maps each operation to its capability', () => {
    const ops: Operation[] = ['read', 'list', 'create', 'update', 'delete', 'patch'];
    for (const granted of ops) {
      const a = acl(caps('p/*', granted));
      for (const op of ops) expect(a.allowOperation('p/x', op).allowed, `${granted} vs ${op}`).toBe(op === granted);
    }
  });

  it('denies when nothing matches', () => {
    expect(acl(caps('secret/*', 'read')).allowOperation('other/x', 'read')).toEqual({ allowed: false, sudo: false });
    expect(new Acl([]).allowOperation('secret/x', 'read').allowed).toBe(false);
  });

  it.each([
    ['without sudo, a root-protected path is denied', ['create', 'update'], { allowed: false, sudo: false }],
    ['with sudo, a root-protected path is allowed', ['create', 'update', 'sudo'], { allowed: true, sudo: true }],
    ['sudo alone does not grant the operation', ['sudo'], { allowed: false, sudo: false }],
  ])('sudo: %s', (_name, granted, expected) => {
    const a = acl(caps('sys/auth/*', ...granted));
    expect(a.allowOperation('sys/auth/ldap', 'update', undefined, { rootProtected: true })).toEqual(expected);
  });

  it('reports sudo on paths that are not root-protected too (for in-handler checks)', () => {
    expect(acl(caps('auth/token/create', 'update', 'sudo')).allowOperation('auth/token/create', 'update')).toEqual({ allowed: true, sudo: true });
    expect(acl(caps('sys/mounts/*', 'update')).allowOperation('sys/mounts/kv', 'update')).toEqual({ allowed: true, sudo: false });
  });

  it('root bypasses every rule, including sudo and parameters', () => {
    const root = Acl.root();
    expect(root.isRoot).toBe(true);
    expect(root.allowOperation('sys/raw/anything', 'delete', { x: 1 }, { rootProtected: true })).toEqual({ allowed: true, sudo: true });
    expect(acl(caps('a', 'read')).isRoot).toBe(false);
  });

  it('a root policy must stand alone', () => {
    expect(() => new Acl([{ name: 'root', raw: '', paths: [] }, parseAclPolicy('default', DEFAULT_POLICY_HCL)])).toThrow(
      'other policies present along with root',
    );
  });

  describe('parameter constraints', () => {
    type P = [name: string, body: string, op: Operation, data: Record<string, unknown> | undefined, allowed: boolean];
    it.each<P>([
      ['required present', 'required_parameters = ["name"]', 'update', { name: 'x' }, true],
      ['required missing', 'required_parameters = ["name"]', 'update', { other: 'x' }, false],
      ['required missing with no data at all', 'required_parameters = ["name"]', 'update', undefined, false],
      ['required names are matched lower-cased', 'required_parameters = ["Name"]', 'update', { name: 'x' }, true],
      ['no data passes allowed/denied lists', 'allowed_parameters = { ttl = ["1h"] }', 'update', undefined, true],
      ['allowed value', 'allowed_parameters = { ttl = ["1h", "2h"] }', 'update', { ttl: '2h' }, true],
      ['value not in allowed list', 'allowed_parameters = { ttl = ["1h", "2h"] }', 'update', { ttl: '3h' }, false],
      ['key not in allowed list', 'allowed_parameters = { ttl = ["1h"] }', 'update', { ttl: '1h', other: 1 }, false],
      ['empty allowed list means any value', 'allowed_parameters = { ttl = [] }', 'update', { ttl: 'anything' }, true],
      ['allowed "*" alone allows every key', 'allowed_parameters = { "*" = [] }', 'update', { a: 1, b: [2] }, true],
      ['allowed "*" plus a constrained key: others free', 'allowed_parameters = { "*" = [], ttl = ["1h"] }', 'update', { a: 1, ttl: '1h' }, true],
      ['allowed "*" plus a constrained key: that key still checked', 'allowed_parameters = { "*" = [], ttl = ["1h"] }', 'update', { ttl: '2h' }, false],
      ['allowed prefix glob', 'allowed_parameters = { name = ["web-*"] }', 'update', { name: 'web-01' }, true],
      ['allowed suffix glob', 'allowed_parameters = { name = ["*-svc"] }', 'update', { name: 'api-svc' }, true],
      ['allowed substring glob', 'allowed_parameters = { name = ["*prod*"] }', 'update', { name: 'eu-prod-1' }, true],
      ['glob does not match elsewhere', 'allowed_parameters = { name = ["web-*"] }', 'update', { name: 'db-web-01' }, false],
      ['a lone "*" value is literal', 'allowed_parameters = { name = ["*"] }', 'update', { name: 'x' }, false],
      ['non-strings compare by deep equality', 'allowed_parameters = { n = [1, 2] }', 'update', { n: 2 }, true],
      ['a number does not equal its string', 'allowed_parameters = { n = [1, 2] }', 'update', { n: '2' }, false],
      ['list values compare as lists', 'allowed_parameters = { tags = [["a", "b"]] }', 'update', { tags: ['a', 'b'] }, true],
      ['request keys are compared lower-cased', 'allowed_parameters = { TTL = ["1h"] }', 'update', { Ttl: '1h' }, true],
      ['denied "*" denies any data', 'denied_parameters = { "*" = [] }', 'update', { a: 1 }, false],
      ['denied "*" allows an empty request', 'denied_parameters = { "*" = [] }', 'update', {}, true],
      ['denied key with empty list denies every value', 'denied_parameters = { admin = [] }', 'update', { admin: false }, false],
      ['denied value', 'denied_parameters = { role = ["root", "adm*"] }', 'update', { role: 'admin' }, false],
      ['value not denied', 'denied_parameters = { role = ["root"] }', 'update', { role: 'dev' }, true],
      ['denied wins over allowed', 'denied_parameters = { ttl = ["9h"] }\nallowed_parameters = { ttl = [] }', 'update', { ttl: '9h' }, false],
      ['checked on create', 'allowed_parameters = { a = [] }', 'create', { b: 1 }, false],
      ['checked on patch', 'allowed_parameters = { a = [] }', 'patch', { b: 1 }, false],
      ['checked on read', 'allowed_parameters = { a = [] }', 'read', { b: 1 }, false],
      ['not checked on delete', 'allowed_parameters = { a = [] }', 'delete', { b: 1 }, true],
      ['not checked on list', 'required_parameters = ["a"]', 'list', undefined, true],
    ])('%s', (_name, body, op, data, allowed) => {
      const a = acl(rule('p/*', `capabilities = ["create", "read", "update", "delete", "list", "patch"]\n${body}`));
      expect(a.allowOperation('p/x', op, data).allowed).toBe(allowed);
    });

    it.each<[string, string, Record<string, unknown>, boolean]>([
      ['allowed lists concatenate', 'allowed_parameters = { ttl = ["2h"] }', { ttl: '2h' }, true],
      ['the first policy\'s values still apply', 'allowed_parameters = { ttl = ["2h"] }', { ttl: '1h' }, true],
      ['an empty list absorbs the other', 'allowed_parameters = { ttl = [] }', { ttl: '5h' }, true],
      ['allowed keys union', 'allowed_parameters = { name = [] }', { name: 'x', ttl: '1h' }, true],
      ['required parameters union', 'required_parameters = ["name"]', { ttl: '1h' }, false],
      ['denied lists union', 'denied_parameters = { ttl = ["1h"] }', { ttl: '1h' }, false],
    ])('merge on the same path: %s', (_name, second, data, allowed) => {
      const a = acl(rule('p/*', 'capabilities = ["update"]\nallowed_parameters = { ttl = ["1h"] }'), rule('p/*', `capabilities = ["update"]\n${second}`));
      expect(a.allowOperation('p/x', 'update', data).allowed).toBe(allowed);
    });
  });

  it.each<[string, number | undefined, boolean]>([
    ['unwrapped request', undefined, false],
    ['below min', 30, false],
    ['within range', 600, true],
    ['above max', 7200, false],
  ])('wrapping TTL bounds: %s', (_name, wrapTtl, allowed) => {
    const a = acl(rule('p/*', 'capabilities = ["read"]\nmin_wrapping_ttl = "1m"\nmax_wrapping_ttl = "1h"'));
    expect(a.allowOperation('p/x', 'read', undefined, { wrapTtl }).allowed).toBe(allowed);
  });

  it('merged wrapping TTLs take the smaller min and the smaller max', () => {
    const a = acl(
      rule('p/*', 'capabilities = ["read"]\nmin_wrapping_ttl = 120\nmax_wrapping_ttl = 3600'),
      rule('p/*', 'capabilities = ["read"]\nmin_wrapping_ttl = 60\nmax_wrapping_ttl = 600'),
    );
    expect(a.allowOperation('p/x', 'read', undefined, { wrapTtl: 90 }).allowed).toBe(true);
    expect(a.allowOperation('p/x', 'read', undefined, { wrapTtl: 900 }).allowed).toBe(false);
  });

  describe('default policy', () => {
    const a = new Acl([parseAclPolicy('default', DEFAULT_POLICY_HCL)]);
    it.each<Case>([
      ['token lookup-self', 'auth/token/lookup-self', 'read', true],
      ['token renew-self', 'auth/token/renew-self', 'update', true],
      ['token revoke-self', 'auth/token/revoke-self', 'update', true],
      ['capabilities-self', 'sys/capabilities-self', 'update', true],
      ['lease renew', 'sys/leases/renew', 'update', true],
      ['lease lookup', 'sys/leases/lookup', 'update', true],
      ['hash tool', 'sys/tools/hash/sha2-256', 'update', true],
      ['cubbyhole', 'cubbyhole/mine', 'create', true],
      ['cubbyhole list', 'cubbyhole/', 'list', true],
      ['OIDC authorize', 'identity/oidc/provider/default/authorize', 'read', true],
      ['not sys/mounts', 'sys/mounts', 'read', false],
      ['not mounting engines', 'sys/mounts/kv', 'update', false],
      ['not other tokens', 'auth/token/lookup', 'update', false],
      ['not secrets', 'secret/data/x', 'read', false],
      ['templated entity paths are skipped without an entity', 'identity/entity/id/{{identity.entity.id}}', 'read', false],
    ])('%s', (_name, path, op, allowed) => {
      expect(a.allowOperation(path, op).allowed).toBe(allowed);
    });
  });

  it.each<[string, string, boolean]>([
    ['own entity id', 'identity/entity/id/e-1', true],
    ['own entity name', 'identity/entity/name/alice', true],
    ['someone else\'s entity', 'identity/entity/id/e-2', false],
    ['metadata template', 'team/blue/x', true],
    ['missing metadata key skips the rule', 'region/x', false],
  ])('fills identity templates from the entity: %s', (_name, path, allowed) => {
    const a = new Acl(
      [
        parseAclPolicy('default', DEFAULT_POLICY_HCL),
        parseAclPolicy('t', caps('team/{{identity.entity.metadata.team}}/*', 'read') + caps('region/{{ identity.entity.metadata.region }}', 'read')),
      ],
      { entity: { id: 'e-1', name: 'alice', metadata: { team: 'blue' } } },
    );
    expect(a.allowOperation(path, 'read').allowed).toBe(allowed);
  });
});

describe('Acl.capabilities', () => {
  it.each<[string, string[], string, string[]]>([
    ['sorted capabilities of the matched rule', [caps('s/*', 'update', 'read', 'sudo', 'list')], 's/x', ['list', 'read', 'sudo', 'update']],
    ['legacy write policy', [rule('s/*', 'policy = "write"')], 's/x', ['create', 'delete', 'list', 'read', 'update']],
    ['deny when nothing matches', [caps('s/*', 'read')], 'other', ['deny']],
    ['deny for an explicit deny', [caps('s/*', 'deny')], 's/x', ['deny']],
    ['deny for an empty capability list', [caps('s/*')], 's/x', ['deny']],
    ['list semantics: "foo/" matches the rule on "foo"', [caps('foo', 'list')], 'foo/', ['list']],
    ['only the best rule, no union across patterns', [caps('s/*', 'read'), caps('s/+', 'update')], 's/x', ['update']],
  ])('%s', (_name, texts, path, expected) => {
    expect(acl(...texts).capabilities(path)).toEqual(expected);
  });

  it('is ["root"] for a root ACL', () => {
    expect(Acl.root().capabilities('anything')).toEqual(['root']);
  });

  it('default policy: lookup-self is readable, sys/mounts is not', () => {
    const a = new Acl([parseAclPolicy('default', DEFAULT_POLICY_HCL)]);
    expect(a.capabilities('auth/token/lookup-self')).toEqual(['read']);
    expect(a.capabilities('sys/mounts')).toEqual(['deny']);
  });
});
