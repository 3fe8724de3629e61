/**
 * compose.yaml and examples/ci/ are files no test here can run (no Docker engine, no CI runner), so they are checked
 * against their formats' published JSON schemas and against the rules docs/container.md gives them: hardened
 * services, secrets only from variables (or a demo value marked as one), and the same wiring the image and the
 * bootstrap file expect.
 *
 * The schemas are the upstream files, byte for byte, read from test/fixtures/schemas/ (README.md there says where
 * each comes from and pins its SHA-256). Where they are absent the schema checks are skipped, saying so.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { parse } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { copies, instructions, readDockerfile } from '../support/dockerfile.ts';

const FIXTURES = 'test/fixtures/schemas';
const SCHEMAS = {
  compose: { file: 'compose-spec.json', sha256: '1f91e091f16b2dd50ab8860e02bb391d22df553d91c145eacedb1b6eff9c3f0e' },
  github: { file: 'github-workflow.json', sha256: '7a952fdb7c1b130732e40ccea9db9bced906c1198e97834f8a49ae3b411f3161' },
  gitlab: { file: 'gitlab-ci.json', sha256: '7568b544b4b95102f21e9fd89d769d54ee6f86b35d2fbb7f7b947d6fa9fc4dda' },
} as const;
type Format = keyof typeof SCHEMAS;

const missing = Object.values(SCHEMAS).map((s) => s.file).filter((f) => !existsSync(join(FIXTURES, f)));
// ajv-formats is CommonJS with its function as the default export; under Node's ESM loader that is the module itself.
type FormatsPlugin = (ajv: Ajv) => Ajv;
const addFormats = ((addFormatsModule as unknown as { default?: FormatsPlugin }).default ?? addFormatsModule) as FormatsPlugin;

function validator(format: Format): ValidateFunction {
  const { file, sha256 } = SCHEMAS[format];
  const bytes = readFileSync(join(FIXTURES, file));
  expect(createHash('sha256').update(bytes).digest('hex'), `${file} is not the pinned upstream copy`).toBe(sha256);
  const schema = JSON.parse(bytes.toString('utf8')) as Record<string, unknown>;
  // The Compose schema names its meta-schema by an https URI Ajv does not know; all three are draft-07, Ajv's default.
  delete schema.$schema;
  // strict: false, because the schemas use editor keywords (markdownDescription, deprecationMessage...).
  const ajv = new Ajv({ allErrors: true, strict: false });
  addFormats(ajv);
  return ajv.compile(schema);
}

const load = (path: string) => parse(readFileSync(path, 'utf8')) as Record<string, any>;
const FILES: Record<Format, string> = { compose: 'compose.yaml', github: 'examples/ci/github-actions.yml', gitlab: 'examples/ci/gitlab-ci.yml' };

/** A deep copy of a document with one change, for the tables of files each schema must refuse. */
function mutate(doc: Record<string, any>, change: (d: Record<string, any>) => void): Record<string, any> {
  const copy = structuredClone(doc);
  change(copy);
  return copy;
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
    ['a service without its image', (d) => { delete d.jobs.integration.services.strongroom.image; }],
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

describe.skipIf(missing.length > 0)(
  missing.length ? `published schemas: skipped, ${missing.join(', ')} not in ${FIXTURES} (see its README.md)` : 'published schemas',
  () => {
    describe.each(Object.keys(SCHEMAS) as Format[])('%s', (format) => {
      const doc = load(FILES[format]);
      let validate: ValidateFunction;
      beforeAll(() => {
        validate = validator(format);
      });

      it(`"${FILES[format]} is valid against its format's published schema"`, () => {
        expect(validate(doc), JSON.stringify(validate.errors, null, 2)).toBe(true);
      });

      it.each(HOSTILE[format])('"a file the schema refuses is refused": %s', (_, change) => {
        expect(validate(mutate(doc, change))).toBe(false);
      });
    });
  },
);

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
