import { describe, expect, it } from 'vitest';
import {
  DEFAULT_LIMITS,
  MAX_BUILT_LENGTH,
  MAX_FORMAT_WIDTH,
  MAX_RANDOM_LENGTH,
  parseTemplate,
  TemplateBudgetError,
  TemplateExecError,
  TemplateParseError,
  vaultFuncs,
  type BudgetLimit,
  type TemplateLimits,
} from '../../src/lib/gotemplate/index.ts';
import { ldifActionGuard } from '../../src/lib/ldif/index.ts';

const funcs = vaultFuncs({ now: () => new Date(Date.UTC(2030, 0, 1)), includeUtf16le: true });
const DATA = { Username: 'v_alice_dev_abc', Password: 'hunter2-S3cret', RoleName: 'dev', DisplayName: 'alice', N: 123456789 };
/** Far above the measured worst case (about 10 ms), so only a runaway template can reach it. */
const NO_FREEZE_MS = 1000;

function render(text: string, limits: Partial<TemplateLimits> = {}, filter = false): string {
  return parseTemplate(text, { name: 't', funcs, limits }).execute(DATA, filter ? { filterAction: ldifActionGuard } : {});
}

/** Runs a template that must be refused, returning the budget error and how long the refusal took. */
function refused(run: () => unknown): { err: TemplateBudgetError; ms: number } {
  const start = performance.now();
  let caught: unknown;
  try {
    run();
  } catch (err) {
    caught = err;
  }
  const ms = performance.now() - start;
  expect(caught).toBeInstanceOf(TemplateBudgetError);
  return { err: caught as TemplateBudgetError, ms };
}

const deep = (open: string, close: string, n: number, inner = ''): string => open.repeat(n) + inner + close.repeat(n);
const LARGE_SOURCE = { maxSourceLength: 1_000_000 };
/** Lets a function's own argument cap be seen before the step budget would end the template anyway. */
const UNLIMITED_STEPS = { maxSteps: Number.MAX_SAFE_INTEGER };

describe('hostile templates end in a TemplateBudgetError naming the limit, promptly', () => {
  const cases: Array<[string, string, BudgetLimit, RegExp, Partial<TemplateLimits>?]> = [
    ['range over a huge int', '{{range 300000000}}{{end}}', 'maxSteps', /^evaluation exceeded the limit of 100000 steps$/],
    ['range over a huge int with variables', '{{range $i := 300000000}}{{if eq $i -1}}x{{end}}{{end}}', 'maxSteps', /steps/],
    ['nested ranges', '{{range 100000}}{{range 100000}}{{end}}{{end}}', 'maxSteps', /steps/],
    ['ranges nested 99 deep', deep('{{range 10}}', '{{end}}', 99), 'maxSteps', /steps/],
    ['continue keeps a huge range going', '{{range 300000000}}{{continue}}{{end}}', 'maxSteps', /steps/],
    ['a pipeline with thousands of arguments in a loop', `{{range 300000000}}{{$x := print ${'1 '.repeat(3000)}}}{{end}}`, 'maxSteps', /steps/],
    ['thousands of variables searched in a loop', `${Array.from({ length: 1200 }, (_, i) => `{{$v${i}:=1}}`).join('')}{{range 300000000}}{{$v0 = 2}}{{end}}`, 'maxSteps', /steps/],
    ['a string doubled in a loop', '{{$x := "0123456789abcdef"}}{{range 100}}{{$x = print $x $x}}{{end}}', 'maxSteps', /steps/],
    ['a string squared by replace', '{{$x := "aaaaaaaaaaaaaaaa"}}{{range 10}}{{$x = replace "a" $x $x}}{{end}}', 'maxSteps', /steps/],
    ['timestamp over a long layout in a loop', '{{$l := printf "%1024s" "Mon"}}{{range 300000000}}{{$x := timestamp $l}}{{end}}', 'maxSteps', /steps/],
    ['escaping functions in a loop', '{{$s := printf "%1024s" "<é>"}}{{range 300000000}}{{$x := urlquery $s | js | html}}{{end}}', 'maxSteps', /steps/],
    ['random 1024 in a loop', '{{range 300000000}}{{$x := random 1024}}{{end}}', 'maxSteps', /steps/],
    ['output bomb: a range printing a long string', `{{range 300000000}}${'x'.repeat(64)}{{end}}`, 'maxOutputLength', /^output exceeded the limit of 32768 characters$/],
    ['output bomb: a range printing data', '{{range 300000000}}{{$.Password}}{{end}}', 'maxOutputLength', /output/],
    ['output bomb: one padded value', '{{range 300000000}}{{printf "%1024s" "x"}}{{end}}', 'maxOutputLength', /output/],
    ['random 100000000', '{{random 100000000}}', 'argument', /^random: length exceeded the limit of 1024$/],
    ['random just past its cap', `{{random ${MAX_RANDOM_LENGTH + 1}}}`, 'argument', /random: length/],
    ['printf width %1000000000d', '{{printf "%1000000000d" 1}}', 'argument', /^printf: width exceeded the limit of 1024$/],
    ['printf precision %.1000000000d', '{{printf "%.1000000000d" 1}}', 'argument', /^printf: precision exceeded the limit of 1024$/],
    ['printf width from an argument', '{{printf "%*s" 1000000000 "x"}}', 'argument', /printf: width/],
    ['printf negative width from an argument', '{{printf "%*s" -1000000000 "x"}}', 'argument', /printf: width/],
    ['printf precision from an argument', '{{printf "%.*f" 1000000000 1.5}}', 'argument', /printf: precision/],
    ['printf width with more digits than a number holds', `{{printf "%${'9'.repeat(400)}d" 1}}`, 'argument', /printf: width/],
    ['printf with thousands of padded verbs', `{{printf "${'%1024d'.repeat(1100)}" ${'1 '.repeat(1100)}}}`, 'argument', /^printf: result length exceeded the limit of 1048576$/, UNLIMITED_STEPS],
    ['replace whose result would be gigabytes', '{{$x := printf "%1024s" "a"}}{{$y := replace " " $x $x}}{{replace " " $y $y}}', 'argument', /^replace: result length exceeded the limit of 1048576$/, UNLIMITED_STEPS],
    ['replace of the empty string', '{{$x := printf "%1024s" "a"}}{{replace "" $x $x}}', 'argument', /replace: result length/, UNLIMITED_STEPS],
    ['{{if}} 10,000 deep', deep('{{if 1}}', '{{end}}', 10_000), 'maxDepth', /^nesting exceeded the limit of 100 levels$/, LARGE_SOURCE],
    ['{{with}} 10,000 deep', deep('{{with 1}}', '{{end}}', 10_000), 'maxDepth', /nesting/, LARGE_SOURCE],
    ['{{range}} 10,000 deep', deep('{{range 1}}', '{{end}}', 10_000), 'maxDepth', /nesting/, LARGE_SOURCE],
    ['parenthesised pipelines 10,000 deep', `{{${deep('(', ')', 10_000, '1')}}}`, 'maxDepth', /nesting/, LARGE_SOURCE],
    ['parenthesised calls 10,000 deep', `{{${deep('(print ', ')', 10_000, '1')}}}`, 'maxDepth', /nesting/, LARGE_SOURCE],
    ['an {{else if}} chain 10,000 long', `{{if 0}}${'{{else if 0}}'.repeat(10_000)}{{end}}`, 'maxDepth', /nesting/, LARGE_SOURCE],
    ['a 10 MB template', 'x'.repeat(10_000_000), 'maxSourceLength', /^template text exceeded the limit of 16384 characters$/],
  ];
  it.each(cases)('%s', (_name, text, limit, reason, limits = {}) => {
    const { err, ms } = refused(() => render(text, limits));
    expect(err.limit).toBe(limit);
    expect(err.reason).toMatch(reason);
    expect(ms).toBeLessThan(NO_FREEZE_MS);
  });

  it('a long LDIF line printed into many times runs out of steps: the action filter is shown the line each time', () => {
    const { err } = refused(() => render('cn: x{{range 300000000}}y{{""}}{{end}}', {}, true));
    expect(err.limit).toBe('maxSteps');
  });

  it('named templates, the only way to recurse, are refused when parsing', () => {
    for (const text of ['{{define "x"}}{{template "x"}}{{end}}{{template "x"}}', '{{template "x"}}', '{{block "x" .}}{{template "x"}}{{end}}']) {
      expect(() => render(text)).toThrow(TemplateParseError);
    }
  });
});

describe('budget errors are typed, located, and never show data', () => {
  it('a budget error is not an exec or parse error, and carries the limit and its value', () => {
    const { err } = refused(() => render('{{range 300000000}}{{end}}'));
    expect(err).not.toBeInstanceOf(TemplateExecError);
    expect(err).not.toBeInstanceOf(TemplateParseError);
    expect({ limit: err.limit, max: err.max }).toEqual({ limit: 'maxSteps', max: DEFAULT_LIMITS.maxSteps });
  });

  it('the message is "template: NAME:LINE:COL: reason", pointing where the budget ran out', () => {
    expect(refused(() => render('a\n  {{range 300000000}}{{end}}')).err.message).toBe('template: t:2:5: evaluation exceeded the limit of 100000 steps');
    expect(refused(() => render('ok\n{{random 100000000}}')).err.message).toBe('template: t:2:3: random: length exceeded the limit of 1024');
    expect(refused(() => render(`${deep('{{if 1}}', '{{end}}', 101)}`)).err.message).toBe(`template: t:1:${100 * 8 + 3}: nesting exceeded the limit of 100 levels`);
  });

  it.each([
    ['output filled with a secret', '{{range 300000000}}{{$.Password}}{{end}}'],
    ['a random length taken from data', '{{random .N}}'],
    ['a printf width taken from data', '{{printf "%*s" .N .Password}}'],
    ['a secret printed on a long line into many times', 'cn: {{range 300000000}}{{$.Password}}{{end}}'],
  ])('no data value in the message: %s', (_name, text) => {
    const { err } = refused(() => render(text, {}, true));
    expect(err.message).not.toContain(DATA.Password);
    expect(err.message).not.toContain(String(DATA.N));
  });
});

describe('limits are options; each is exact at its boundary', () => {
  const cases: Array<[string, Partial<TemplateLimits>, string, string, BudgetLimit]> = [
    // {{range N}} costs N + 2 steps: the range node, its pipeline's command, then one per iteration.
    ['maxSteps', { maxSteps: 12 }, '{{range 10}}{{end}}', '{{range 11}}{{end}}', 'maxSteps'],
    ['maxOutputLength', { maxOutputLength: 5 }, '{{range 5}}x{{end}}', '{{range 6}}x{{end}}', 'maxOutputLength'],
    ['maxDepth counts control structures', { maxDepth: 2 }, deep('{{if 1}}', '{{end}}', 2), deep('{{if 1}}', '{{end}}', 3), 'maxDepth'],
    ['maxDepth counts parentheses too', { maxDepth: 2 }, '{{if 1}}{{(1)}}{{end}}', '{{if 1}}{{((1))}}{{end}}', 'maxDepth'],
    ['maxSourceLength', { maxSourceLength: 5 }, 'abcde', 'abcdef', 'maxSourceLength'],
  ];
  it.each(cases)('%s', (_name, limits, atLimit, pastLimit, limit) => {
    expect(() => render(atLimit, limits)).not.toThrow();
    expect(refused(() => render(pastLimit, limits)).err.limit).toBe(limit);
  });

  it('the defaults: 16 KiB of text, 100 levels, 100,000 steps, 32 KiB of output', () => {
    expect(DEFAULT_LIMITS).toEqual({ maxSourceLength: 16 * 1024, maxDepth: 100, maxSteps: 100_000, maxOutputLength: 32 * 1024 });
    expect(() => render(deep('{{if 1}}', '{{end}}', DEFAULT_LIMITS.maxDepth))).not.toThrow();
  });
});

describe('function argument caps', () => {
  it.each([
    ['random up to 1024 characters', `{{random ${MAX_RANDOM_LENGTH} | len}}`, String(MAX_RANDOM_LENGTH)],
    ['printf width up to 1024', `{{printf "%${MAX_FORMAT_WIDTH}d" 1 | len}}`, String(MAX_FORMAT_WIDTH)],
    ['printf precision up to 1024', `{{printf "%.${MAX_FORMAT_WIDTH}d" 1 | len}}`, String(MAX_FORMAT_WIDTH)],
    ['truncate with a huge length copies no more than its input', '{{"abc" | truncate 1000000000}}', 'abc'],
    ['truncate_sha256 with a huge length copies no more than its input', '{{"abc" | truncate_sha256 1000000000}}', 'abc'],
    ['slice and index bounds are checked against the value, not allocated', '{{slice "abc" 1}}', 'bc'],
  ])('allowed: %s', (_name, text, want) => {
    expect(render(text)).toBe(want);
  });

  it('replace may build a result of up to 1 Mi characters', () => {
    // 1023 spaces and an "a"; each space becomes all 1024 characters.
    const text = '{{$x := printf "%1024s" "a"}}{{replace " " $x $x | len}}';
    const length = 1023 * 1024 + 1;
    expect(length).toBeLessThanOrEqual(MAX_BUILT_LENGTH);
    expect(render(text, UNLIMITED_STEPS)).toBe(String(length));
  });
});

describe('real templates stay far inside the defaults', () => {
  const tenth: Partial<TemplateLimits> = {
    maxSteps: DEFAULT_LIMITS.maxSteps / 10,
    maxOutputLength: DEFAULT_LIMITS.maxOutputLength / 10,
    maxDepth: DEFAULT_LIMITS.maxDepth / 10,
    maxSourceLength: DEFAULT_LIMITS.maxSourceLength / 3,
  };
  const group = (i: number): string => `dn: cn=group${i},ou=groups,dc=corp,dc=example,dc=com\nchangetype: modify\nadd: member\nmember: CN={{.Username}},OU=Vault,DC=corp,DC=example,DC=com\n-\n\n`;
  const activeDirectory = `dn: CN={{.Username}},OU=Vault,DC=corp,DC=example,DC=com
objectClass: user
userPrincipalName: {{.Username}}@corp.example.com
sAMAccountName: {{.Username | truncate 20}}
displayName: {{.DisplayName}} ({{.RoleName}})
description: issued {{timestamp "2006-01-02T15:04:05Z07:00"}} for {{.RoleName}}
unicodePwd:: {{ printf "%q" .Password | utf16le | base64 }}
userAccountControl: 66048

${Array.from({ length: 20 }, (_, i) => group(i)).join('')}`;

  it.each([
    ["Vault's default username template", 'v_{{.DisplayName}}_{{.RoleName}}_{{random 10}}_{{unix_time}}'],
    ['a username template with every function', '{{ printf "v_%s_%s_%s_%s" (.DisplayName | truncate 15) (.RoleName | truncate 15) (random 20) unix_time | replace "." "-" | lowercase | truncate_sha256 64 }}'],
    ['a 4 KiB Active Directory creation LDIF joining 20 groups', activeDirectory],
  ])('%s renders within a tenth of the step, output and depth limits (a third of the text limit)', (_name, text) => {
    expect(render(text, tenth, true)).not.toBe('');
  });
});
