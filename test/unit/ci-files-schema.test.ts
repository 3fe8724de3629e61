/**
 * compose.yaml and examples/ci/ are files no test here can run (no Docker engine, no CI runner), so they are checked
 * against their formats' own validators and against the rules docs/container.md gives them: hardened services,
 * secrets only from variables (or a demo value marked as one), and the same wiring the image and the bootstrap file
 * expect.
 *
 * Every validator is a devDependency pinned by package-lock.json (third-party files come only from npm): the most
 * authoritative current copy of each format's schema found there.
 * - Compose: the Compose specification's schema as dclint (a maintained Compose linter) ships it, checked with ajv.
 *   The `schemastore` package's copy is years old (a pre-draft-06 `id`, which ajv refuses).
 * - GitHub Actions: @actions/workflow-parser, GitHub's own parser (its VS Code extension's), which reads a workflow
 *   against GitHub's workflow template and reports what the Actions service would (a `runs-on` that `schemastore`'s
 *   copy refuses, for one).
 * - GitLab CI: GitLab's own ci.json (the schema its pipeline editor uses), which gitlab-ci-local downloads unchanged at
 *   each release and bundles into its CLI; no npm package ships it as a file. The CLI checks a pipeline only after
 *   expanding it, which drops a misspelt service key, so the schema is read out of the bundle instead (as data, with
 *   TypeScript's parser, never run) and the file itself is checked with ajv, as the editor does. The `schemastore`
 *   package's copy is older than GitLab's service variables.
 */
import { readFileSync } from 'node:fs';
import { registerHooks } from 'node:module';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import addFormatsModule from 'ajv-formats';
import ts from 'typescript';
import { parse, stringify } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { copies, instructions, readDockerfile } from '../support/dockerfile.ts';

// ajv-formats is CommonJS with its function as the default export; under Node's ESM loader that is the module itself.
type FormatsPlugin = (ajv: Ajv) => Ajv;
const addFormats = ((addFormatsModule as unknown as { default?: FormatsPlugin }).default ?? addFormatsModule) as FormatsPlugin;

/** Each format's check: the errors its validator reports for a file's text, none for a valid file. */
type Check = (text: string) => Promise<string[]>;

function ajvCheck(schema: Record<string, unknown>): Check {
  // Both schemas name their meta-schema by a URI Ajv does not know; both are draft-07, Ajv's default.
  delete schema.$schema;
  // strict: false, because the schemas use editor keywords (markdownDescription, deprecated on a type...).
  const ajv = new Ajv({ allErrors: true, strict: false });
  addFormats(ajv);
  const validate = ajv.compile(schema);
  return async (text) => (validate(parse(text)) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath} ${e.message}`));
}

const composeCheck = () => ajvCheck(JSON.parse(readFileSync('node_modules/dclint/schemas/compose.schema.json', 'utf8')));

// actions/languageservices#387: the parser imports its workflow template, a .json file, without `with { type: 'json' }`,
// which Node's ESM loader refuses; this hook supplies the attribute for that package's JSON files only.
registerHooks({
  resolve(specifier, context, nextResolve) {
    const resolved = nextResolve(specifier, context);
    const own = resolved.url.includes('/node_modules/@actions/workflow-parser/') && resolved.url.endsWith('.json');
    return own ? { ...resolved, importAttributes: { type: 'json' } } : resolved;
  },
});
const { convertWorkflowTemplate, NoOperationTraceWriter, parseWorkflow } = await import('@actions/workflow-parser');

const githubCheck: Check = async (text) => {
  const parsed = parseWorkflow({ name: 'github-actions.yml', content: text }, new NoOperationTraceWriter());
  // The conversion adds what the template alone cannot say (job and step rules); it skips a file that has errors.
  if (parsed.value) await convertWorkflowTemplate(parsed.context, parsed.value);
  return parsed.context.errors.getErrors().map((e) => e.message);
};

const GITLAB_CI_LOCAL = 'node_modules/gitlab-ci-local/dist/index.js';
const GITLAB_SCHEMA_ID = 'https://gitlab.com/.gitlab-ci.yml';

/** GitLab's ci.json out of gitlab-ci-local's bundle: the one object literal with its `$id`, read as JSON data. */
function bundledGitlabSchema(): Record<string, unknown> {
  const bundle = ts.createSourceFile(GITLAB_CI_LOCAL, readFileSync(GITLAB_CI_LOCAL, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.JS);
  const found: ts.ObjectLiteralExpression[] = [];
  const visit = (node: ts.Node): void => {
    const isSchema = ts.isObjectLiteralExpression(node) && node.properties.some((p) => ts.isPropertyAssignment(p) && keyOf(p) === '$id' && ts.isStringLiteral(p.initializer) && p.initializer.text === GITLAB_SCHEMA_ID);
    if (isSchema) found.push(node);
    else ts.forEachChild(node, visit);
  };
  visit(bundle);
  if (found.length !== 1) throw new Error(`${GITLAB_CI_LOCAL} holds ${found.length} schemas with $id ${GITLAB_SCHEMA_ID}, not one`);
  return jsonValue(found[0]) as Record<string, unknown>;
}

const keyOf = (p: ts.ObjectLiteralElementLike): string | undefined =>
  ts.isPropertyAssignment(p) && (ts.isIdentifier(p.name) || ts.isStringLiteral(p.name) || ts.isNumericLiteral(p.name)) ? p.name.text : undefined;

/** A minified JSON value back to data; fails on anything else (a call, a spread, a reference). */
function jsonValue(node: ts.Expression): unknown {
  if (ts.isObjectLiteralExpression(node)) {
    return Object.fromEntries(node.properties.map((p) => {
      const key = keyOf(p);
      if (key === undefined) throw new Error(`not a JSON key in ${GITLAB_CI_LOCAL}'s schema at ${p.pos}`);
      return [key, jsonValue((p as ts.PropertyAssignment).initializer)];
    }));
  }
  if (ts.isArrayLiteralExpression(node)) return node.elements.map(jsonValue);
  if (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) return node.text;
  if (ts.isNumericLiteral(node)) return Number(node.text);
  if (node.kind === ts.SyntaxKind.TrueKeyword || node.kind === ts.SyntaxKind.FalseKeyword) return node.kind === ts.SyntaxKind.TrueKeyword;
  if (node.kind === ts.SyntaxKind.NullKeyword) return null;
  // The minifier writes true and false as !0 and !1, and keeps negative numbers as a minus sign.
  if (ts.isPrefixUnaryExpression(node) && ts.isNumericLiteral(node.operand)) {
    if (node.operator === ts.SyntaxKind.ExclamationToken) return !Number(node.operand.text);
    if (node.operator === ts.SyntaxKind.MinusToken) return -Number(node.operand.text);
  }
  throw new Error(`not a JSON value in ${GITLAB_CI_LOCAL}'s schema at ${node.pos}`);
}

type Format = 'compose' | 'github' | 'gitlab';
// Built in each format's beforeAll, so that a validator that cannot be loaded fails its own tests, not the file's.
const CHECKS: Record<Format, () => Check> = { compose: composeCheck, github: () => githubCheck, gitlab: () => ajvCheck(bundledGitlabSchema()) };

const load = (path: string) => parse(readFileSync(path, 'utf8')) as Record<string, any>;
const FILES: Record<Format, string> = { compose: 'compose.yaml', github: 'examples/ci/github-actions.yml', gitlab: 'examples/ci/gitlab-ci.yml' };

/** A file's text with one change, for the tables of files each validator must refuse. */
function mutate(doc: Record<string, any>, change: (d: Record<string, any>) => void): string {
  const copy = structuredClone(doc);
  change(copy);
  return stringify(copy);
}
const HOSTILE: Record<Format, [string, (d: Record<string, any>) => void][]> = {
  compose: [
    ['a misspelt service key', (d) => { d.services.strongroom['read-only'] = true; }],
    // Compose takes a string wherever a boolean goes (it may be a ${VARIABLE}), so a list is the wrong type here.
    ['read_only as a list', (d) => { d.services.strongroom.read_only = [true]; }],
    ['a depends_on condition Compose does not have', (d) => { d.services.strongroom.depends_on.openldap.condition = 'service_ready'; }],
    ['a healthcheck without its test in a list or string', (d) => { d.services.strongroom.healthcheck.test = { cmd: 'true' }; }],
    ['a secret with neither file nor environment', (d) => { d.secrets['unseal-key'] = { path: 'x' }; }],
  ],
  github: [
    ['a job without runs-on', (d) => { delete d.jobs.integration['runs-on']; }],
    ['service variables under Compose\'s environment key', (d) => { const s = d.jobs.integration.services.strongroom; s.environment = s.env; delete s.env; }],
    ['service ports as a map', (d) => { d.jobs.integration.services.strongroom.ports = { 8200: 8200 }; }],
    ['a step with both uses and run', (d) => { d.jobs.integration.steps[0].run = 'true'; }],
    ['an unknown permission scope', (d) => { d.permissions.everything = 'write'; }],
  ],
  gitlab: [
    ['a service with an alias but no name', (d) => { delete d.integration.services[0].name; }],
    ['a job whose script is a map', (d) => { d.integration.script = { run: 'true' }; }],
    ['a misspelt job key', (d) => { d.integration.before_scripts = d.integration.before_script; }],
    ['service variables as a list', (d) => { d.integration.services[1].variables = ['LDAP_URL=ldap://openldap:1389']; }],
    ['a stage that is not a string', (d) => { d.integration.stage = 1; }],
  ],
};

describe('published schemas', () => {
  describe.each(Object.keys(CHECKS) as Format[])('%s', (format) => {
    const doc = load(FILES[format]);
    let check: Check;
    beforeAll(() => {
      check = CHECKS[format]();
    });

    it(`"${FILES[format]} is valid against its format's published schema"`, async () => {
      expect(await check(readFileSync(FILES[format], 'utf8'))).toEqual([]);
    });

    it.each(HOSTILE[format])('"a file the schema refuses is refused": %s', async (_, change) => {
      expect(await check(mutate(doc, change))).not.toEqual([]);
    });
  });
});

const SECRET_NAME = /PASSWORD|TOKEN|KEY|SECRET/;
const compose = load('compose.yaml');
const services = compose.services as Record<string, Record<string, any>>;

describe('compose.yaml', () => {
  it.each(Object.keys(services))('"every service is hardened": %s runs read-only, without capabilities or new privileges, with a healthcheck', (name) => {
    const s = services[name];
    expect(s.read_only).toBe(true);
    expect(s.cap_drop).toEqual(['ALL']);
    expect(s.security_opt).toContain('no-new-privileges:true');
    expect(s.healthcheck.test[0]).toBe('CMD');
    expect(s.privileged).toBeUndefined();
  });

  it.each(Object.keys(services))('"a published port listens on loopback only": %s', (name) => {
    for (const port of services[name].ports ?? []) expect(String(port)).toMatch(/^127\.0\.0\.1:\d+:\d+$/);
  });

  it('"Strongroom starts once the directory is healthy"', () => {
    expect(services.strongroom.depends_on).toEqual({ openldap: { condition: 'service_healthy' } });
  });

  it('"the bootstrap file is mounted read-only from examples/bootstrap and named by STRONGROOM_BOOTSTRAP"', () => {
    const mount = (services.strongroom.volumes as string[]).find((v) => v.endsWith(':ro'))!;
    const [source, target] = mount.split(':');
    expect(source).toBe('./examples/bootstrap/strongroom.yaml');
    expect(services.strongroom.environment.STRONGROOM_BOOTSTRAP).toBe(target);
  });

  it('"the data directory is a named volume and the unseal key a compose secret"', () => {
    expect(services.strongroom.volumes).toContain('strongroom-data:/data');
    expect(services.strongroom.secrets).toEqual(['unseal-key']);
    expect(services.strongroom.environment.STRONGROOM_UNSEAL_KEY_FILE).toBe('/run/secrets/unseal-key');
    expect(compose.secrets['unseal-key'].file).toMatch(/^\$\{STRONGROOM_UNSEAL_KEY_FILE:-\.\/examples\/compose\/demo-unseal\.key\}$/);
  });

  it.each(Object.keys(services))('"no secret is written in the file: a variable, with at most a demo default marked as one": %s', (name) => {
    for (const [key, value] of Object.entries(services[name].environment ?? {})) {
      if (!SECRET_NAME.test(key) || key.endsWith('_FILE') || key === 'STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS') continue;
      expect(value, key).toMatch(new RegExp(`^\\$\\{${key}:-demo-only-[a-z-]+\\}$`));
    }
  });

  it('"both services are given the same bind password"', () => {
    expect(services.openldap.environment.LDAP_BIND_PASSWORD).toBe(services.strongroom.environment.LDAP_BIND_PASSWORD);
  });

  it('"the demo unseal key is a key the server accepts (32 bytes, base64)"', () => {
    expect(Buffer.from(readFileSync('examples/compose/demo-unseal.key', 'utf8').trim(), 'base64')).toHaveLength(32);
  });
});

/** Where the image puts the example bootstrap file: its WORKDIR joined with the COPY of examples/bootstrap. */
function imageBootstrapPath(): string {
  const final = readDockerfile('Dockerfile').at(-1)!;
  const workdir = instructions(final, 'WORKDIR').at(-1)!;
  const copy = copies(final).find((c) => c.sources.includes('examples/bootstrap'))!;
  return join(workdir, copy.dest, 'strongroom.yaml');
}

const github = load(FILES.github);
const gitlab = load(FILES.gitlab);
const ghServices = github.jobs.integration.services as Record<string, Record<string, any>>;
const glServices = gitlab.integration.services as Record<string, any>[];
const glStrongroom = glServices.find((s) => s.alias === 'strongroom')!;

describe('examples/ci', () => {
  it('"the services wire the bootstrap file the image ships"', () => {
    expect(ghServices.strongroom.env.STRONGROOM_BOOTSTRAP).toBe(imageBootstrapPath());
    expect(glStrongroom.variables.STRONGROOM_BOOTSTRAP).toBe(imageBootstrapPath());
  });

  it('"Strongroom reaches the directory by its service name"', () => {
    expect(ghServices.strongroom.env.LDAP_URL).toBe('ldap://openldap:1389');
    expect(glStrongroom.variables.LDAP_URL).toBe('ldap://openldap:1389');
    expect(glServices.map((s) => s.alias).sort()).toEqual(['openldap', 'strongroom']);
    expect(gitlab.integration.variables.FF_NETWORK_PER_BUILD).toBe('true');
  });

  it('"every secret comes from the CI\'s secret store"', () => {
    const ghEnv = [...Object.values(ghServices).map((s) => s.env ?? {}), ...github.jobs.integration.steps.map((s: any) => s.env ?? {})];
    for (const env of ghEnv) {
      for (const [key, value] of Object.entries(env)) if (SECRET_NAME.test(key) && key !== 'STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS') expect(value, key).toBe(`\${{ secrets.${key} }}`);
    }
    for (const s of glServices) {
      for (const [key, value] of Object.entries(s.variables ?? {})) if (SECRET_NAME.test(key) && key !== 'STRONGROOM_BOOTSTRAP_ALLOW_TOKEN_IDS') expect(value, key).toBe(`$${key}`);
    }
  });

  it('"the test step reads a credential with the CI token and binds with it"', () => {
    const run = github.jobs.integration.steps.map((s: any) => s.run ?? '').join('\n');
    expect(run).toMatch(/X-Service-Token: \$STRONGROOM_CI_TOKEN".*\/v1\/ldap\/static-cred\/app/s);
    expect(run).toMatch(/::add-mask::\$password/);
    expect(run).toMatch(/ldapwhoami/);
    const script = (gitlab.integration.script as string[]).join('\n');
    expect(script).toMatch(/X-Service-Token: \$STRONGROOM_CI_TOKEN".*\/v1\/ldap\/static-cred\/app/s);
    expect(script).toMatch(/ldapwhoami/);
  });
});
