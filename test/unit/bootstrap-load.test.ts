import { describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BootstrapInvalidError, loadBootstrapFile, parseBootstrap } from '../../src/bootstrap/load.ts';
import { parseTemplate, ReferenceError, renderTemplate, type ReferenceSource } from '../../src/bootstrap/references.ts';
import { BOOTSTRAP_LIMITS } from '../../src/bootstrap/schema.ts';

const SECRET = 's3cr3t-value-never-shown';
const source: ReferenceSource = {
  env: { PASS: SECRET, NESTED: '${PASS}', POLICY: 'root', ZERO: '0' },
  readFile: (path) => {
    if (path === '/run/secrets/pass') return Buffer.from(`${SECRET}\n`);
    throw Object.assign(new Error('x'), { code: 'ENOENT' });
  },
};

function errors(text: string, allowTokenIds = false): string[] {
  try {
    parseBootstrap('f.yaml', text, { allowTokenIds, references: source });
  } catch (err) {
    if (err instanceof BootstrapInvalidError) return err.lines();
    throw err;
  }
  return [];
}

describe('the file\'s schema', () => {
  it.each<[string, string, string[]]>([
    ['unknown keys', 'mounts:\n  - path: ldap\n    type: ldap\n    colour: blue\nextra: 1\n', ['f.yaml:4: mounts[0].colour: unknown key "colour"', 'f.yaml:5: extra: unknown key "extra"']],
    ['wrong types', 'mounts:\n  - path: ldap\n    type: [ldap]\npolicies:\n  acl: {name: x}\n', ['f.yaml:3: mounts[0].type: expected string, received array', 'f.yaml:5: policies.acl: expected array, received object']],
    ['a missing key', 'policies:\n  acl:\n    - name: ci\n', ['f.yaml:3: policies.acl[0].policy: missing required key (string)']],
    ['a bad duration', 'mounts:\n  - path: ldap\n    type: ldap\n    static_roles:\n      - {name: a, username: u, rotation_period: 3 days}\n', ['f.yaml:5: mounts[0].static_roles[0].rotation_period: invalid duration']],
    ['a negative duration', 'auth:\n  - path: cloud\n    type: cloud\n    roles: [{name: r, token_ttl: -5}]\n', ['f.yaml:4: auth[0].roles[0].token_ttl: a duration cannot be negative']],
    ['duplicated names', 'policies:\n  acl:\n    - {name: ci, policy: p}\n    - {name: CI, policy: q}\n', ['f.yaml:4: policies.acl[1].name: the same name as policies.acl[0]']],
    ['duplicated mount paths', 'mounts:\n  - {path: ldap, type: ldap}\n  - {path: ldap, type: cloud}\n', ['f.yaml:3: mounts[1].path: the same path as mounts[0]']],
    ['a role kind the type lacks', 'mounts:\n  - {path: c, type: cloud, static_roles: [{name: a}]}\n', ['f.yaml:2: mounts[0].static_roles: a mount of type "cloud" has no static_roles (it has roles)']],
    ['a reserved path', 'mounts:\n  - {path: sys, type: ldap}\n  - {path: auth/x, type: ldap}\n', ['f.yaml:2: mounts[0].path: "sys" is reserved (auth methods go under "auth:")', 'f.yaml:3: mounts[1].path: "auth/x" is reserved (auth methods go under "auth:")']],
    ['a path with a slash at the end', 'audit: [{path: file/, type: file}]\n', ['f.yaml:1: audit[0].path: expected a mount path without leading or trailing "/" (e.g. "ldap" or "ci/ldap")']],
    ['the root policy', 'policies:\n  acl: [{name: root, policy: p}]\n', ['f.yaml:2: policies.acl[0].name: "root" cannot be changed']],
    ['prune of an unknown kind', 'prune: {tokens: true}\n', ['f.yaml:1: prune.tokens: unknown key "tokens"']],
    ['a fixed token id outside dev mode', 'tokens: [{id: ci, policies: [ci]}]\n', ['f.yaml:1: tokens[0].id: tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true']],
    ['duplicated keys', 'mounts: []\nmounts: []\n', ['f.yaml:2: Map keys must be unique']],
    ['nesting past the bound', 'mounts:\n  - {path: c, type: cloud, roles: [{name: r, x: [[[[[1]]]]]}]}\n', ['f.yaml:2: mounts[0].roles[0].x: expected a string, number, boolean, list or map (nested at most 4 deep)']],
  ])('%s: every error with its path and line', (_, text, expected) => {
    expect(errors(text)).toEqual(expected);
  });

  it('"every error" is listed, not the first: schema errors and rules together, in line order', () => {
    expect(errors('mounts:\n  - path: ldap\n    type: ldap\n    x: 1\n    tune: {max_lease_ttl: forever}\ntokens: [{id: t}]\n')).toEqual([
      'f.yaml:4: mounts[0].x: unknown key "x"',
      'f.yaml:5: mounts[0].tune.max_lease_ttl: invalid duration',
      'f.yaml:6: tokens[0].id: tokens with fixed ids are declared only in dev mode or with STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS=true',
    ]);
  });

  it('JSON is accepted, with lines too', () => {
    expect(errors('{\n  "mounts": [\n    {"path": "ldap", "type": "ldap", "tune": {"default_lease_ttl": "1y"}}\n  ]\n}\n')).toEqual(['f.yaml:3: mounts[0].tune.default_lease_ttl: unknown unit in duration (units: ns, us, µs, μs, ms, s, m, h)']);
    expect(errors('{"policies": {"acl": [{"name": "ci", "policy": "p"}]}}')).toEqual([]);
  });

  it('an "oversize file" is refused before it is parsed', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bootstrap-unit-'));
    try {
      const file = join(dir, 'big.yaml');
      writeFileSync(file, `# ${'x'.repeat(BOOTSTRAP_LIMITS.fileBytes)}\n`);
      const err = (() => {
        try {
          loadBootstrapFile(file, { allowTokenIds: false });
        } catch (e) {
          return e;
        }
      })();
      expect(err).toBeInstanceOf(BootstrapInvalidError);
      expect((err as BootstrapInvalidError).lines()).toEqual([`${file}:0: larger than the maximum of ${BOOTSTRAP_LIMITS.fileBytes} bytes`]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('"too many objects" and alias bombs are refused', () => {
    const many = `policies:\n  acl:\n${Array.from({ length: BOOTSTRAP_LIMITS.objects + 1 }, (_, i) => `    - {name: p${i}, policy: x}\n`).join('')}`;
    expect(errors(many)).toEqual([`f.yaml:1: ${BOOTSTRAP_LIMITS.objects + 1} objects, more than the maximum of ${BOOTSTRAP_LIMITS.objects}`]);
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${'bcdefghi'[i]}: &${'bcdefghi'[i]} [${Array(9).fill(`*${'abcdefgh'[i]}`).join(', ')}]`)].join('\n');
    expect(errors(bomb)).toEqual([expect.stringMatching(/^f\.yaml:1: Excessive alias count/)]);
  });
});

describe('declared tokens: no path to root', () => {
  const ROOT = 'tokens[0].policies: a declared token cannot hold the reserved "root" policy';
  const FOREVER = 'tokens[0].period: a declared token cannot renew forever: a period needs an explicit_max_ttl that ends it';
  // Each row: the token's fields after its id, and the errors (empty: accepted).
  it.each<[string, string, string[]]>([
    ['root', 'policies: [root]', [ROOT]],
    ['" Root " (trimmed and lower-cased, as policy names are)', 'policies: [ci, " Root "]', [ROOT]],
    ['ROOT in a comma list', 'policies: "ci,ROOT"', [ROOT]],
    ['root from a variable', 'policies: ["${POLICY}"]', [ROOT]],
    ['response-wrapping', 'policies: [Response-Wrapping]', ['tokens[0].policies: a declared token cannot hold the reserved "response-wrapping" policy']],
    ['a period alone', 'policies: [ci], period: 24h', [FOREVER]],
    ['a period in seconds with explicit_max_ttl 0', 'policies: [ci], period: 3600, explicit_max_ttl: 0', [FOREVER]],
    ['a period and explicit_max_ttl from a variable that is 0', 'policies: [ci], period: 1h, explicit_max_ttl: "${ZERO}"', [FOREVER]],
    ['a root period token (both)', 'policies: [root], period: 1h', [ROOT, FOREVER]],
    ['a period bounded by explicit_max_ttl', 'policies: [ci], period: 1h, explicit_max_ttl: 24h', []],
    ['an ordinary token', 'policies: [ci, default], ttl: 1h', []],
    ['period 0 (not periodic)', 'policies: [ci], period: 0', []],
  ])('%s', (_, fields, expected) => {
    expect(errors(`tokens: [{id: t, ${fields}}]\n`, true)).toEqual(expected.map((e) => `f.yaml:1: ${e}`));
  });
});

describe('references', () => {
  it('${VAR} and ${file:/path} resolve; a file\'s last newline is dropped; $${ is a literal', () => {
    const { spec } = parseBootstrap('f.yaml', 'mounts:\n  - path: ldap\n    type: ldap\n    config: {bindpass: "${PASS}", binddn: "${file:/run/secrets/pass}", userdn: "a $${PASS} b-${PASS}"}\n', { allowTokenIds: false, references: source });
    expect(spec.mounts![0].config).toEqual({ bindpass: SECRET, binddn: SECRET, userdn: `a \${PASS} b-${SECRET}` });
  });

  it('a resolved value is never resolved again (no loop, no second lookup)', () => {
    const { spec } = parseBootstrap('f.yaml', 'mounts: [{path: ldap, type: ldap, config: {binddn: "${NESTED}"}}]\n', { allowTokenIds: false, references: source });
    expect(spec.mounts![0].config).toEqual({ binddn: '${PASS}' });
  });

  it.each<[string, string]>([
    ['${MISSING}', 'f.yaml:1: mounts[0].config.binddn: ${MISSING}: the environment variable MISSING is not set'],
    ['${file:/run/secrets/none}', 'f.yaml:1: mounts[0].config.binddn: ${file:/run/secrets/none}: no such file'],
    ['${file:relative/path}', 'f.yaml:1: mounts[0].config.binddn: ${file:relative/path}: a file reference needs an absolute path'],
    ['${${PASS}}', 'f.yaml:1: mounts[0].config.binddn: a reference inside a reference: references are resolved once and never nested'],
    ['${file:${PASS}}', 'f.yaml:1: mounts[0].config.binddn: a reference inside a reference: references are resolved once and never nested'],
    ['${PASS', 'f.yaml:1: mounts[0].config.binddn: a "${" without its closing "}" (write "$${" for a literal "${")'],
    ['${exec:rm -rf /}', 'f.yaml:1: mounts[0].config.binddn: ${exec:rm -rf /}: expected ${NAME} (an environment variable) or ${file:/absolute/path}'],
    [`\${${'A'.repeat(BOOTSTRAP_LIMITS.referenceLength + 1)}}`, `f.yaml:1: mounts[0].config.binddn: a reference longer than the maximum of ${BOOTSTRAP_LIMITS.referenceLength} characters`],
  ])('%s is an error naming it, never its value', (value, expected) => {
    const lines = errors(`mounts: [{path: ldap, type: ldap, config: {binddn: ${JSON.stringify(value)}}}]\n`);
    expect(lines).toEqual([expected]);
    expect(lines.join()).not.toContain(SECRET);
  });

  it('names, paths and types cannot be references', () => {
    expect(errors('policies:\n  acl: [{name: "${PASS}", policy: p}]\n')).toEqual([
      'f.yaml:2: policies.acl[0].name: expected letters, digits and "_", "-", ".", "@"',
    ]);
    expect(errors('tokens: [{id: t, type: "${PASS}"}]\n', true)).toEqual([
      'f.yaml:1: tokens[0].type: a name, path or type cannot be a reference (it is shown in reports and logs)',
    ]);
  });

  it('"more than the maximum" references is said once', () => {
    const many = Array.from({ length: BOOTSTRAP_LIMITS.references + 5 }, () => '"${PASS}"').join(', ');
    expect(errors(`mounts: [{path: ldap, type: ldap, config: {certificate: [${many}]}}]\n`)).toEqual([`f.yaml:1: mounts[0].config.certificate[${BOOTSTRAP_LIMITS.references}]: more than the maximum of ${BOOTSTRAP_LIMITS.references} references in the file`]);
  });

  it('an oversized variable or file is refused without its value', () => {
    const big: ReferenceSource = { env: { BIG: 'x'.repeat(BOOTSTRAP_LIMITS.referenceValueBytes + 1) }, readFile: () => Buffer.alloc(BOOTSTRAP_LIMITS.referenceValueBytes + 1) };
    expect(() => renderTemplate(parseTemplate('${BIG}'), big)).toThrow(new ReferenceError(`\${BIG}: longer than the maximum of ${BOOTSTRAP_LIMITS.referenceValueBytes} bytes`));
    expect(() => renderTemplate(parseTemplate('${file:/big}'), big)).toThrow(new ReferenceError(`\${file:/big}: larger than the maximum of ${BOOTSTRAP_LIMITS.referenceValueBytes} bytes`));
  });
});
