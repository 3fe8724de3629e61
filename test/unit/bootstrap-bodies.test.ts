import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { BootstrapInvalidError, parseBootstrap, type LoadOptions } from '../../src/bootstrap/load.ts';

function errors(file: unknown, options: Partial<LoadOptions> = {}): string[] {
  try {
    parseBootstrap('f.yaml', typeof file === 'string' ? file : stringify(file), { allowTokenIds: true, ...options });
  } catch (err) {
    if (err instanceof BootstrapInvalidError) return err.lines().map((l) => l.replace(/^f\.yaml:\d+: /, ''));
    throw err;
  }
  return [];
}

const ldap = (extra: Record<string, unknown>) => ({ mounts: [{ path: 'ldap', type: 'ldap', ...extra }] });
const cloud = (extra: Record<string, unknown>) => ({ mounts: [{ path: 'cloud-ci', type: 'cloud', ...extra }] });
const cloudAuth = (extra: Record<string, unknown>) => ({ auth: [{ path: 'cloud-ci', type: 'cloud', ...extra }] });

describe('body fields: "Keys are the API\'s own field names", checked before anything is applied', () => {
  it.each<[string, unknown, string]>([
    ['mount tuning', ldap({ tune: { max_lease_tll: '1h' } }), 'mounts[0].tune.max_lease_tll: unknown field "max_lease_tll" for sys/mounts/ldap/tune; did you mean "max_lease_ttl"?'],
    ['auth tuning', cloudAuth({ tune: { default_lease_tt: '1h' } }), 'auth[0].tune.default_lease_tt: unknown field "default_lease_tt" for sys/auth/cloud-ci/tune; did you mean "default_lease_ttl"?'],
    ['ldap config', ldap({ config: { bindpas: 'x' } }), 'mounts[0].config.bindpas: unknown field "bindpas" for ldap/config; did you mean "bindpass"?'],
    ['a static role', ldap({ static_roles: [{ name: 'app', username: 'u', rotation_perod: '1h' }] }), 'mounts[0].static_roles[0].rotation_perod: unknown field "rotation_perod" for ldap/static-role/app; did you mean "rotation_period"?'],
    ['a dynamic role', ldap({ dynamic_roles: [{ name: 'ci', creation_ldif: 'x', deletion_ldif: 'y', defualt_ttl: '1h' }] }), 'mounts[0].dynamic_roles[0].defualt_ttl: unknown field "defualt_ttl" for ldap/role/ci; did you mean "default_ttl"?'],
    ['a library set', ldap({ library_sets: [{ name: 'pool', service_account_names: ['a'], disable_check_in_enforcment: true }] }), 'mounts[0].library_sets[0].disable_check_in_enforcment: unknown field "disable_check_in_enforcment" for ldap/library/pool; did you mean "disable_check_in_enforcement"?'],
    ['cloud config', cloud({ config: { tenant: 't' } }), 'mounts[0].config.tenant: unknown field "tenant" for cloud-ci/config'],
    ['a cloud role', cloud({ roles: [{ name: 'r', cloud_role: '[]' }] }), 'mounts[0].roles[0].cloud_role: unknown field "cloud_role" for cloud-ci/roles/r; did you mean "cloud_roles"?'],
    ['auth config', cloudAuth({ config: { resourse: 'https://management.azure.com/' } }), 'auth[0].config.resourse: unknown field "resourse" for auth/cloud-ci/config; did you mean "resource"?'],
    ['an auth role', cloudAuth({ roles: [{ name: 'r', bound_service_principal_ids: ['x'], token_polices: ['ci'] }] }), 'auth[0].roles[0].token_polices: unknown field "token_polices" for auth/cloud-ci/role/r; did you mean "token_policies"?'],
    ['a token', { tokens: [{ id: 't', polices: ['ci'] }] }, 'tokens[0].polices: unknown field "polices" for auth/token/create-orphan; did you mean "policies"?'],
    ['a password policy', { policies: { password: [{ name: 'p', policy: 'length = 20', lenght: 3 }] } }, 'policies.password[0].lenght: unknown key "lenght"'],
    ['an ACL policy', { policies: { acl: [{ name: 'p', polcy: 'path "x" {}' }] } }, 'policies.acl[0].polcy: unknown key "polcy"; did you mean "policy"?'],
    ['a mount', { mounts: [{ path: 'ldap', type: 'ldap', descripton: 'x' }] }, 'mounts[0].descripton: unknown key "descripton"; did you mean "description"?'],
    ['an audit device', { audit: [{ path: 'f', type: 'file', options: { file_pth: '/tmp/a.log' } }] }, 'audit[0].options.file_pth: unknown option "file_pth" for a file audit device; did you mean "file_path"?'],
  ])('a typo in %s is an error naming its path, the key and the field meant', (_, file, expected) => {
    expect(errors(file)).toContain(expected);
  });

  it.each<[string, unknown, string]>([
    ['a dynamic role\'s creation_ldif on a static role', ldap({ static_roles: [{ name: 'app', username: 'u', rotation_period: '1h', creation_ldif: 'x' }] }), 'mounts[0].static_roles[0].creation_ldif: unknown field "creation_ldif" for ldap/static-role/app'],
    ['a static role\'s username on a library set', ldap({ library_sets: [{ name: 'pool', service_account_names: ['a'], username: 'u' }] }), 'mounts[0].library_sets[0].username: unknown field "username" for ldap/library/pool'],
    ['ldap config\'s binddn on cloud config', cloud({ config: { binddn: 'cn=x' } }), 'mounts[0].config.binddn: unknown field "binddn" for cloud-ci/config'],
    ['the auth method\'s resource on the secrets engine\'s config', cloud({ config: { resource: 'https://management.azure.com/' } }), 'mounts[0].config.resource: unknown field "resource" for cloud-ci/config'],
    ['a cloud role\'s cloud_roles on an auth role', cloudAuth({ roles: [{ name: 'r', bound_service_principal_ids: ['x'], cloud_roles: '[]' }] }), 'auth[0].roles[0].cloud_roles: unknown field "cloud_roles" for auth/cloud-ci/role/r'],
    ['an auth role\'s token_policies on a token', { tokens: [{ id: 't', token_policies: ['ci'] }] }, 'tokens[0].token_policies: unknown field "token_policies" for auth/token/create-orphan'],
    ['a socket device\'s address on a file device', { audit: [{ path: 'f', type: 'file', options: { file_path: '/tmp/a.log', address: '127.0.0.1:9' } }] }, 'audit[0].options.address: unknown option "address" for a file audit device'],
  ])('"a valid field of another endpoint" is refused: %s', (_, file, expected) => {
    expect(errors(file)).toEqual([expected]);
  });

  it.each<[string, unknown]>([
    ['an auth role\'s deprecated policies, ttl, max_ttl, period, num_uses, bound_cidrs', cloudAuth({ roles: [{ name: 'r', bound_service_principal_ids: ['x'], policies: ['ci'], ttl: '1h', max_ttl: '2h', period: '0', num_uses: 0, bound_cidrs: ['10.0.0.0/8'] }] })],
    ['Vault\'s azure_roles and azure_groups on a cloud role', { mounts: [{ path: 'az', type: 'azure', roles: [{ name: 'r', azure_roles: '[]', azure_groups: '[]' }] }] }],
    ['a token\'s deprecated lease', { tokens: [{ id: 't', lease: '1h', display_name: 'ci' }] }],
    ['Vault\'s openldap type with every kind', { mounts: [{ path: 'ol', type: 'openldap', config: { binddn: 'cn=x', bindpass: 'p', url: 'ldap://127.0.0.1' }, static_roles: [{ name: 'a', username: 'u', rotation_period: '1h' }], dynamic_roles: [{ name: 'd', creation_ldif: 'x', deletion_ldif: 'y' }], library_sets: [{ name: 'l', service_account_names: ['s'] }] }] }],
    ['an older file device\'s path option', { audit: [{ path: 'f', type: 'file', options: { path: '/tmp/a.log', hmac_accessor: false } }] }],
    ['the issue\'s example', {
      mounts: [{ path: 'ldap', type: 'ldap', description: 'd', tune: { default_lease_ttl: '1h', max_lease_ttl: '24h' }, config: { url: 'ldap://x', binddn: 'cn=a', bindpass: 'p', userdn: 'ou=u' }, static_roles: [{ name: 'app', username: 'app-db', rotation_period: '24h' }], dynamic_roles: [{ name: 'ci', creation_ldif: 'x', deletion_ldif: 'y', default_ttl: '1h' }], library_sets: [{ name: 'pool', service_account_names: ['svc1', 'svc2'], ttl: '1h' }] }],
      policies: { acl: [{ name: 'ci', policy: 'path "ldap/*" {}' }] },
      tokens: [{ id: 'ci-token', policies: ['ci'], ttl: '1h', display_name: 'ci' }],
    }],
  ])('"a key the server accepts must not be refused": %s', (_, file) => {
    expect(errors(file)).toEqual([]);
  });

  it.each<[string, unknown, string]>([
    ['a cloud role\'s cloud_roles as a list (the API takes a JSON string)', cloud({ roles: [{ name: 'r', cloud_roles: [{ role_name: 'Reader' }] }] }), 'mounts[0].roles[0].cloud_roles: invalid value for field "cloud_roles": expected a string'],
    ['a boolean that is not one', ldap({ config: { url: 'ldap://x', starttls: 'maybe' } }), 'mounts[0].config.starttls: invalid value for field "starttls": expected a boolean (true/false)'],
    ['a list given as a map', ldap({ library_sets: [{ name: 'p', service_account_names: { a: 1 } }] }), 'mounts[0].library_sets[0].service_account_names: invalid value for field "service_account_names": expected a list or a comma-separated string'],
    ['an integer that is not one', { tokens: [{ id: 't', num_uses: 'many' }] }, 'tokens[0].num_uses: invalid value for field "num_uses": expected an integer'],
  ])('"the whole file is checked": %s is refused by the field\'s own rule before anything is applied', (_, file, expected) => {
    expect(errors(file)).toEqual([expected]);
  });

  it('a value from a reference is judged once resolved, and refused without being shown', () => {
    const references = { env: { TIMEOUT: 'soon-and-secret', GOOD: '30' }, readFile: () => Buffer.alloc(0) };
    const lines = errors(ldap({ config: { url: 'ldap://x', request_timeout: '${TIMEOUT}', connection_timeout: '${GOOD}' } }), { references });
    expect(lines).toEqual(['mounts[0].config.request_timeout: invalid value for field "request_timeout": refused once its reference resolved (the value is not shown)']);
    expect(lines.join()).not.toContain('soon-and-secret');
    // A duration already found wrong is said once.
    expect(errors(ldap({ static_roles: [{ name: 'a', username: 'u', rotation_period: 'soon' }] }))).toEqual(['mounts[0].static_roles[0].rotation_period: invalid duration']);
  });

  it('a name no endpoint accepts, a type this server lacks and an audit device type are errors before anything is applied', () => {
    expect(errors({ mounts: [{ path: 'ldap', type: 'ldap', static_roles: [{ name: 'a.', username: 'u', rotation_period: '1h' }] }, { path: 'kv', type: 'kv', config: { x: 1 } }], audit: [{ path: 's', type: 'syslog' }] })).toEqual([
      'mounts[0].static_roles[0]: the server has no endpoint ldap/static-role/a. (is the name one the endpoint accepts?)',
      'mounts[1].type: unknown secrets engine type "kv" (expected one of azure, cloud, ldap, openldap)',
      'audit[0].type: the syslog audit device is not available: use a socket device with the syslog daemon\'s TCP or UDP input as its address (docs/audit.md)',
    ]);
  });

  it('"every error with its YAML path and line": several typos in one file, each on its own line', () => {
    const text = 'mounts:\n  - path: ldap\n    type: ldap\n    config:\n      url: ldap://x\n      bindpas: p\n    static_roles:\n      - name: app\n        usrname: u\n';
    expect(() => parseBootstrap('f.yaml', text, { allowTokenIds: false })).toThrow(expect.objectContaining({
      issues: [
        { line: 6, path: 'mounts[0].config.bindpas', message: 'unknown field "bindpas" for ldap/config; did you mean "bindpass"?' },
        { line: 9, path: 'mounts[0].static_roles[0].usrname', message: 'unknown field "usrname" for ldap/static-role/app; did you mean "username"?' },
      ],
    }));
  });

  it('a suggestion is made only when one field is obviously meant', () => {
    // "ttl" and "tll" are one edit apart, but so is nothing else; "xyz" is near nothing.
    expect(errors(ldap({ library_sets: [{ name: 'p', service_account_names: ['a'], tll: '1h', xyz: 1 }] }))).toEqual([
      'mounts[0].library_sets[0].tll: unknown field "tll" for ldap/library/p; did you mean "ttl"?',
      'mounts[0].library_sets[0].xyz: unknown field "xyz" for ldap/library/p',
    ]);
  });

  it('audit options are judged as the server judges them, by its settings, after references resolve', () => {
    const device = (options: Record<string, unknown>) => ({ audit: [{ path: 'f', type: 'file', options: { file_path: '/tmp/a.log', ...options } }] });
    expect(errors(device({ log_raw: true }))).toEqual(['audit[0].options: invalid value for audit device option "log_raw": writing secrets in the clear is refused unless the server is started with STRONGROOM_AUDIT_ALLOW_RAW=true']);
    expect(errors(device({ log_raw: true }), { audit: { allowRaw: true, allowPrefix: false, dir: undefined } })).toEqual([]);
    expect(errors(device({ mode: '0755' }))).toEqual(['audit[0].options: invalid value for audit device option "mode": an audit file may not be executable']);
    expect(errors({ audit: [{ path: 'f', type: 'file', options: { file_path: 'relative.log' } }] })).toEqual(['audit[0].options: invalid value for audit device option "file_path": must be an absolute path, "stdout" or "discard"']);
    // A reference that fails is reported once, not judged again as a value.
    expect(errors({ audit: [{ path: 'f', type: 'file', options: { file_path: '${NOT_SET_ANYWHERE_AUDIT}' } }] }, { references: { env: {}, readFile: () => Buffer.alloc(0) } })).toEqual([
      'audit[0].options.file_path: ${NOT_SET_ANYWHERE_AUDIT}: the environment variable NOT_SET_ANYWHERE_AUDIT is not set',
    ]);
    expect(errors({ audit: [{ path: 'f', type: 'file', options: { file_path: '${AUDIT_FILE}' } }] }, { references: { env: { AUDIT_FILE: '/var/log/a.log' }, readFile: () => Buffer.alloc(0) } })).toEqual([]);
  });
});
