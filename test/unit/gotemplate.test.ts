import { describe, expect, it } from 'vitest';
import { parseTemplate, TemplateExecError, TemplateParseError, vaultFuncs, withArity } from '../../src/lib/gotemplate/index.ts';

/** Class methods are Go methods (invoked); own function-valued properties are func fields. */
class Greeter {
  Prefix = 'hi';
  Greet(name: string): string {
    return `${this.Prefix} ${name}`;
  }
  Self(): Greeter {
    return this;
  }
}

const render = (text: string, data?: unknown, funcs = {}): string => parseTemplate(text, { name: 't', funcs }).execute(data);

// Expected outputs follow Go's text/template documentation and semantics.
describe('gotemplate: actions, fields, variables', () => {
  const cases: Array<[string, string, unknown, string]> = [
    ['plain text', 'hello', undefined, 'hello'],
    ['field', 'hi {{.Name}}', { Name: 'ann' }, 'hi ann'],
    ['chained fields', '{{.A.B.C}}', { A: { B: { C: 'deep' } } }, 'deep'],
    ['dot', '{{.}}', 'x', 'x'],
    ['spaces inside delimiters', '{{ .Name }}', { Name: 'n' }, 'n'],
    ['trim both sides (Go doc example)', '{{23 -}} < {{- 45}}', undefined, '23<45'],
    ['trim across newlines', 'a\n  {{- "b" -}}\n  c', undefined, 'abc'],
    ['dash without space is a negative number', '{{-3}}', undefined, '-3'],
    ['comment', 'a{{/* note */}}b', undefined, 'ab'],
    ['trimmed comment', 'a {{- /* note */ -}} b', undefined, 'ab'],
    ['declare and use', '{{$x := "v"}}{{$x}}', undefined, 'v'],
    ['assign', '{{$x := 1}}{{$x = 2}}{{$x}}', undefined, '2'],
    ['$ is the data', '{{with .A}}{{$.B}}{{end}}', { A: 1, B: 'root' }, 'root'],
    ['variable field', '{{$u := .U}}{{$u.Name}}', { U: { Name: 'z' } }, 'z'],
    ['variable declared in if is scoped to it', '{{$x := "outer"}}{{if true}}{{$x := "inner"}}{{$x}}{{end}} {{$x}}', undefined, 'inner outer'],
    ['assignment inside if reaches the outer variable', '{{$x := 1}}{{if true}}{{$x = 2}}{{end}}{{$x}}', undefined, '2'],
    ['method call with argument', '{{.Greet "bob"}}', new Greeter(), 'hi bob'],
    ['method result chains into a field', '{{.Self.Prefix}}', new Greeter(), 'hi'],
    ['map key', '{{.M.k}}', { M: new Map([['k', 'v']]) }, 'v'],
    ['missing map key prints <no value>', '{{.M.nope}}', { M: new Map() }, '<no value>'],
    ['field of a missing map key', '{{.M.nope.deeper}}', { M: new Map() }, '<no value>'],
    ['nil data', '{{.}}', undefined, '<no value>'],
    ['parenthesised pipeline and field', '{{(.A).B}}', { A: { B: 'b' } }, 'b'],
    ['string escapes', '{{"a\\tb\\u00e9\\x41"}}', undefined, 'a\tbéA'],
    ['raw string', '{{`a\\n`}}', undefined, 'a\\n'],
    ['char constant is an int', "{{'a'}}", undefined, '97'],
    ['hex, octal and binary ints', '{{0x1F}} {{010}} {{0o17}} {{0b101}} {{1_000}}', undefined, '31 8 15 5 1000'],
    ['float', '{{1.5}} {{.F}}', { F: 0.25 }, '1.5 0.25'],
    ['bool', '{{true}} {{false}}', undefined, 'true false'],
  ];
  it.each(cases)('%s', (_name, text, data, want) => {
    expect(render(text, data)).toBe(want);
  });
});

describe('gotemplate: pipelines and functions', () => {
  const cases: Array<[string, string, unknown, string]> = [
    ['piped value is the last argument', '{{"world" | printf "%s-%s" "hello"}}', undefined, 'hello-world'],
    ['chained pipes', '{{3 | printf "%d" | len}}', undefined, '1'],
    ['nested call', '{{len (index .L 1)}}', { L: ['a', 'bcd'] }, '3'],
    ['and returns first false', '{{and 1 0 2}}', undefined, '0'],
    ['and returns last when all true', '{{and 1 2 3}}', undefined, '3'],
    ['or returns first true', '{{or 0 "" "x" "y"}}', undefined, 'x'],
    ['and short-circuits', '{{and false (index .L 9)}}', { L: [] }, 'false'],
    ['or short-circuits', '{{or true (index .L 9)}}', { L: [] }, 'true'],
    ['not', '{{not 0}} {{not "a"}}', undefined, 'true false'],
    ['len of string counts bytes', '{{len "héllo"}}', undefined, '6'],
    ['len of slice and map', '{{len .L}} {{len .M}}', { L: [1, 2], M: new Map([['a', 1]]) }, '2 1'],
    ['index of slice, nested', '{{index .L 1 0}}', { L: [[1], [2, 3]] }, '2'],
    ['index of string yields a byte', '{{index "abc" 1}}', undefined, '98'],
    ['index of missing map key', '{{index .M "x"}}', { M: new Map() }, '<no value>'],
    ['slice', '{{slice "abcdef" 1 3}} {{slice .L 1}}', { L: [1, 2, 3] }, 'bc [2 3]'],
    ['eq with several', '{{eq 2 1 2}} {{eq "a" "b"}}', undefined, 'true false'],
    ['ne lt le gt ge', '{{ne 1 2}} {{lt 1 2}} {{le 2 2}} {{gt "b" "a"}} {{ge 1 2}}', undefined, 'true true true true false'],
    ['eq with nil', '{{eq .X nil}}', { X: null }, 'true'],
    ['html', '{{html "<a href=\'x\'>&\\"</a>"}}', undefined, '&lt;a href=&#39;x&#39;&gt;&amp;&#34;&lt;/a&gt;'],
    ['js', '{{js "it\'s \\"<b>\\" & a=b"}}', undefined, 'it\\\'s \\"\\u003Cb\\u003E\\" \\u0026 a\\u003Db'],
    ['urlquery', '{{urlquery "a b&c/é"}}', undefined, 'a+b%26c%2F%C3%A9'],
    ['call of a func-valued field', '{{call .F 2 3}}', { F: (a: number, b: number) => a + b }, '5'],
    ['print spaces only between non-strings', '{{print 1 2 "a" 3 "b" "c"}}', undefined, '1 2a3bc'],
    ['println', '{{println 1 "a"}}', undefined, '1 a\n'],
    ['print nil', '{{print nil}}', undefined, '<nil>'],
    ['slice value printing', '{{.}}', [1, 'a', [true]], '[1 a [true]]'],
    ['map value printing is sorted', '{{.}}', new Map([['b', 2], ['a', 1]]), 'map[a:1 b:2]'],
    ['struct value printing', '{{.}}', { A: 1, B: 'x' }, '{1 x}'],
  ];
  it.each(cases)('%s', (_name, text, data, want) => {
    expect(render(text, data)).toBe(want);
  });

  it('custom FuncMap functions and overriding a builtin', () => {
    expect(render('{{shout "a"}}', undefined, { shout: (s: unknown) => `${String(s)}!` })).toBe('a!');
    expect(render('{{len "abc"}}', undefined, { len: () => 'mine' })).toBe('mine');
  });
});

describe('gotemplate: control structures', () => {
  const cases: Array<[string, string, unknown, string]> = [
    ['if true', '{{if .A}}yes{{end}}', { A: 1 }, 'yes'],
    ['if else', '{{if .A}}yes{{else}}no{{end}}', { A: '' }, 'no'],
    ['else if chain', '{{if eq .N 1}}one{{else if eq .N 2}}two{{else if eq .N 3}}three{{else}}many{{end}}', { N: 3 }, 'three'],
    ['else if chain falls through', '{{if eq .N 1}}one{{else if eq .N 2}}two{{else}}many{{end}}', { N: 9 }, 'many'],
    ['truthiness: empty slice, zero, nil, empty map are false', '{{if .L}}a{{end}}{{if .Z}}b{{end}}{{if .N}}c{{end}}{{if .M}}d{{end}}{{if .S}}e{{end}}', { L: [], Z: 0, N: null, M: new Map(), S: {} }, 'e'],
    ['with sets dot', '{{with .U}}{{.Name}}{{end}}', { U: { Name: 'w' } }, 'w'],
    ['with else', '{{with .E}}x{{else}}empty{{end}}', { E: '' }, 'empty'],
    ['else with', '{{with .A}}a{{else with .B}}b={{.}}{{else}}none{{end}}', { A: 0, B: 'bee' }, 'b=bee'],
    ['with declaration', '{{with $v := .A}}{{$v}}{{end}}', { A: 'q' }, 'q'],
    ['range slice', '{{range .}}[{{.}}]{{end}}', ['a', 'b'], '[a][b]'],
    ['range with index and value', '{{range $i, $v := .}}{{$i}}={{$v}} {{end}}', ['a', 'b'], '0=a 1=b '],
    ['range map visits keys sorted', '{{range $k, $v := .}}{{$k}}:{{$v}},{{end}}', new Map([['zeta', 1], ['alpha', 2], ['mid', 3]]), 'alpha:2,mid:3,zeta:1,'],
    ['range map with one variable gets values', '{{range $v := .}}{{$v}}{{end}}', new Map([['b', 2], ['a', 1]]), '12'],
    ['range int keys sorted numerically', '{{range $k, $v := .}}{{$k}}{{end}}', new Map([[10, 'x'], [9, 'y'], [100, 'z']]), '910100'],
    ['range else on empty', '{{range .}}x{{else}}empty{{end}}', [], 'empty'],
    ['range else on nil', '{{range .L}}x{{else}}empty{{end}}', { L: null }, 'empty'],
    ['range over an int', '{{range 3}}{{.}}{{end}}', undefined, '012'],
    ['break', '{{range .}}{{if eq . 3}}{{break}}{{end}}{{.}}{{end}}', [1, 2, 3, 4], '12'],
    ['continue', '{{range .}}{{if eq . 2}}{{continue}}{{end}}{{.}}{{end}}', [1, 2, 3], '13'],
    ['range variable scoping', '{{$x := "out"}}{{range .}}{{$x := .}}{{end}}{{$x}}', ['in'], 'out'],
    ['dot restored after range', '{{range .L}}{{end}}{{.N}}', { L: [1], N: 'n' }, 'n'],
  ];
  it.each(cases)('%s', (_name, text, data, want) => {
    expect(render(text, data)).toBe(want);
  });
});

describe('gotemplate: printf', () => {
  const cases: Array<[string, string]> = [
    ['{{printf "%s|%v|%d" "a" 1 2}}', 'a|1|2'],
    ['{{printf "%05d|%-8s|%.3s|%+d|%8.3s|" 42 "ab" "abcdef" 5 "abcdef"}}', '00042|ab      |abc|+5|     abc|'],
    ['{{printf "%x %X %x %#x %o %#o %b %c %U" 255 255 "hi" 255 8 8 5 65 65}}', 'ff FF 6869 0xff 10 010 101 A U+0041'],
    ['{{printf "%q %q" "a\\"b\\n" 97}}', '"a\\"b\\n" \'a\''],
    ['{{printf "%f %.2f %e %E %g %g %g" 3.14159 2.5 1234.5678 0.5 0.00001234 1234567.5 2.5}}', '3.141590 2.50 1.234568e+03 5.000000E-01 1.234e-05 1.2345675e+06 2.5'],
    ['{{printf "%.3g %8.2f|%-8.2f|%08.3f" 1234.5678 3.14159 3.14159 -3.14159}}', '1.23e+03     3.14|3.14    |-003.142'],
    ['{{printf "%t %v %5t" true false true}}', 'true false  true'],
    ['{{printf "%d%%" 50}}', '50%'],
    ['{{printf "%d" "x"}}', '%!d(string=x)'],
    ['{{printf "%d %d" 1}}', '1 %!d(MISSING)'],
    ['{{printf "%d" 1 2}}', '1%!(EXTRA int=2)'],
    ['{{printf "%T %T %T %T" 1 "s" 1.5 true}}', 'int string float64 bool'],
    ['{{printf "%v %d" .L .L}}', '[1 2] [1 2]'],
    ['{{printf "%+v" .S}}', '{A:1 B:x}'],
    ['{{printf "%6.2f|%-6d|%6d" 1.005 7 -7}}', '  1.00|7     |    -7'],
    ['{{printf "% x" "abc"}}', '61 62 63'],
  ];
  it.each(cases)('%s', (text, want) => {
    expect(render(text, { L: [1, 2], S: { A: 1, B: 'x' } })).toBe(want);
  });
});

describe('gotemplate: parse errors', () => {
  const cases: Array<[string, number, number, string]> = [
    ['{{.A }', 1, 6, 'unexpected "}" in operand'],
    ['{{foo}}', 1, 3, 'function "foo" not defined'],
    ['{{if}}x{{end}}', 1, 5, 'missing value for if'],
    ['x{{end}}', 1, 4, 'unexpected {{end}}'],
    ['{{if .A}}x', 1, 11, 'unexpected EOF'],
    ['ok\n  {{$x}}', 2, 5, 'undefined variable "$x"'],
    ['{{.A', 1, 5, 'unclosed action'],
    ['{{"abc}}', 1, 3, 'unterminated quoted string'],
    ['{{/* x }}', 1, 1, 'unclosed comment'],
    ['{{/* x */ .A}}', 1, 1, 'comment ends before closing delimiter'],
    ['{{break}}', 1, 3, '{{break}} outside {{range}}'],
    ['{{range .}}{{else}}{{break}}{{end}}', 1, 22, '{{break}} outside {{range}}'],
    ['{{1 | 2}}', 1, 7, 'non executable command in pipeline stage 2'],
    ['{{"a".B}}', 1, 3, 'unexpected . after term "\\"a\\""'],
    ['{{if .A}}{{else}}{{else}}{{end}}', 1, 20, 'expected end; found {{else}}'],
    ['{{define "x"}}{{end}}', 1, 3, '{{define}} is not supported'],
    ['{{)}}', 1, 3, 'unexpected right paren'],
    ['{{3x}}', 1, 3, 'bad number syntax: "3x"'],
  ];
  it.each(cases)('%j', (text, line, col, reason) => {
    let caught: unknown;
    try {
      parseTemplate(text, { name: 't' });
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(TemplateParseError);
    const err = caught as TemplateParseError;
    expect({ line: err.line, col: err.col, reason: err.reason }).toEqual({ line, col, reason });
    expect(err.message).toBe(`template: t:${line}:${col}: ${reason}`);
  });
});

describe('gotemplate: exec errors', () => {
  const cases: Array<[string, unknown, string]> = [
    ['{{.Missing}}', { A: 1 }, 'template: t:1:3: executing "t" at <.Missing>: can\'t evaluate field Missing in type struct'],
    ['{{.A.B}}', { A: null }, 'nil pointer evaluating interface {}.B'],
    ['{{.A.B}}', { A: 'str' }, "can't evaluate field B in type string"],
    ['{{index .L 5}}', { L: [1] }, 'error calling index: index out of range: 5'],
    ['{{lt 1 "a"}}', undefined, 'error calling lt: incompatible types for comparison'],
    ['{{eq .L .L}}', { L: [1] }, 'error calling eq: non-comparable type []interface {}'],
    ['{{len 3}}', undefined, 'error calling len: len of type int'],
    ['{{nil}}', undefined, 'nil is not a command'],
    ['{{"x" 1}}', undefined, 'can\'t give argument to non-function "x"'],
    ['{{not 1 2}}', undefined, 'wrong number of args for not: want 1 got 2'],
    ['{{printf}}', undefined, 'wrong number of args for printf: want at least 1 got 0'],
    ['{{range .}}{{end}}', true, "range can't iterate over a value of type bool"],
    ['{{.F 1}}', { F: () => 1 }, 'F has arguments but cannot be invoked as function'],
    ['{{.F}}', { F: () => 1 }, "can't print .F of type func"],
    ['{{boom 1}}', undefined, 'error calling boom: kaput'],
    ['{{call .F}}', new Map([['F', 1]]), 'error calling call: non-function of type int'],
  ];
  it.each(cases)('%s', (text, data, want) => {
    const funcs = { boom: () => { throw new Error('kaput'); } };
    const run = (): string => render(text, data, funcs);
    expect(run).toThrow(TemplateExecError);
    expect(run).toThrow(want);
  });

  it.each(['{{range .Password}}{{end}}', '{{range $a, $b := .Password}}{{end}}', '{{range $k, $v := .Count}}{{end}}'])(
    '"an execution error never carries a data value" (unlike Go, which prints it): %s',
    (text) => {
      const secret = { Password: 'S3cret-pw-value', Count: 917_381_273 };
      const run = (): string => render(text, secret);
      expect(run).toThrow(TemplateExecError);
      try {
        run();
      } catch (err) {
        expect((err as Error).message).not.toMatch(/S3cret-pw-value|917381273/);
      }
    },
  );

  it('declared arity is checked before calling', () => {
    const two = withArity((a, b) => `${String(a)}${String(b)}`, 2);
    expect(() => render('{{two 1}}', undefined, { two })).toThrow('wrong number of args for two: want 2 got 1');
  });
});

describe('gotemplate: action filter', () => {
  it('sees each printed action with its source and the line so far, never literal text', () => {
    const seen: Array<[string, string, string]> = [];
    const out = parseTemplate('a: {{.X}}\nb{{print 1}}').execute({ X: 'x' }, {
      filterAction: (printed, ctx) => {
        seen.push([printed, ctx.action, ctx.lineBefore]);
        return printed.toUpperCase();
      },
    });
    expect(out).toBe('a: X\nb1');
    expect(seen).toEqual([['x', '.X', 'a: '], ['1', 'print 1', 'b']]);
  });
});

describe('gotemplate: Vault functions', () => {
  const now = new Date(Date.UTC(2024, 1, 3, 16, 5, 9, 120)); // Sat 2024-02-03 16:05:09.120 UTC
  const counter = (n: number): Buffer => Buffer.from(Array.from({ length: n }, (_, i) => i));
  const funcs = vaultFuncs({ now: () => now, randomBytes: counter, includeUtf16le: true });
  const run = (text: string, data?: unknown): string => parseTemplate(text, { funcs }).execute(data);

  // truncate_sha256 expectations are Vault's own test vectors (sdk/helper/template/funcs_test.go).
  const cases: Array<[string, unknown, string]> = [
    ['{{ "foobarbaz" | truncate 5 }}', undefined, 'fooba'],
    ['{{ "foobarbaz" | truncate 100 }}', undefined, 'foobarbaz'],
    ['{{ "thisisareallylongstring" | truncate_sha256 9 }}', undefined, 't4bb25641'],
    ['{{ "thisisareallylongstring" | truncate_sha256 12 }}', undefined, 'this704cd12b'],
    ['{{ "thisisareallylongstring" | truncate_sha256 22 }}', undefined, 'thisisareallyl7f978be6'],
    ['{{ "thisisareallylongstring" | truncate_sha256 23 }}', undefined, 'thisisareallylongstring'],
    ['{{ .X | uppercase }} {{ .X | lowercase }}', { X: 'fOoBaR' }, 'FOOBAR foobar'],
    ['{{ .X | replace "-" "_" }}', { X: 'a-b-c' }, 'a_b_c'],
    ['{{ "foobar" | sha256 }}', undefined, 'c3ab8ff13720e8ad9047dd39466b3c8974e592c2fa383d4a3960714caef0c4f2'],
    ['{{ "hello" | base64 }}', undefined, 'aGVsbG8='],
    ['{{ unix_time }} {{ unix_time_millis }}', undefined, '1706976309 1706976309120'],
    ['{{ timestamp "2006-01-02T15:04:05Z07:00" }}', undefined, '2024-02-03T16:05:09Z'],
    ['{{ timestamp "Mon Jan _2 15:04:05 MST 2006" }}', undefined, 'Sat Feb  3 16:05:09 UTC 2024'],
    ['{{ timestamp "Monday, January 2, 06 3:4:5 PM -0700" }}', undefined, 'Saturday, February 3, 24 4:5:9 PM +0000'],
    ['{{ timestamp "15:04:05.000 .999999 ,000000 002 pm" }}', undefined, '16:05:09.120 .12 ,120000 034 pm'],
    ['{{ timestamp "20060102150405" }}', undefined, '20240203160509'],
    ['{{ random 5 }}', undefined, 'ABCDE'],
    ['{{ .P | utf16le | base64 }}', { P: 'ab' }, 'YQBiAA=='],
  ];
  it.each(cases)('%s', (text, data, want) => {
    expect(run(text, data)).toBe(want);
  });

  it('random is base62, unbiased by rejection, and uses crypto by default', () => {
    // Bytes >= 248 would bias the modulo; they must be skipped.
    const biased = vaultFuncs({ now: () => now, randomBytes: (n) => Buffer.alloc(n, 250).fill(1, n - 1), includeUtf16le: false });
    expect(parseTemplate('{{random 1}}', { funcs: biased }).execute(undefined)).toBe('B');
    const real = vaultFuncs({ now: () => now, includeUtf16le: false });
    expect(parseTemplate('{{random 40}}', { funcs: real }).execute(undefined)).toMatch(/^[A-Za-z0-9]{40}$/);
  });

  it('uuid is an RFC 4122 v4 UUID', () => {
    expect(run('{{uuid}}')).toBe('00010203-0405-4607-8809-0a0b0c0d0e0f');
  });

  it('Vault default username template has the documented shape', () => {
    const real = vaultFuncs({ now: () => now, includeUtf16le: false });
    const out = parseTemplate('v_{{.DisplayName}}_{{.RoleName}}_{{random 10}}_{{unix_time}}', { funcs: real })
      .execute({ DisplayName: 'token', RoleName: 'testrole' });
    expect(out).toMatch(/^v_token_testrole_[A-Za-z0-9]{10}_1706976309$/);
  });

  it('utf16le exists only when asked for (LDIF templates)', () => {
    const noUtf16 = vaultFuncs({ now: () => now, includeUtf16le: false });
    expect(() => parseTemplate('{{ .P | utf16le }}', { funcs: noUtf16 })).toThrow('function "utf16le" not defined');
  });

  it('argument errors read like Vault', () => {
    expect(() => run('{{ "abc" | truncate 0 }}')).toThrow('error calling truncate: max length must be > 0 but was 0');
    expect(() => run('{{ "abc" | truncate_sha256 8 }}')).toThrow('error calling truncate_sha256: max length must be > 8 but was 8');
    expect(() => run('{{ random }}')).toThrow('wrong number of args for random: want 1 got 0');
  });
});
