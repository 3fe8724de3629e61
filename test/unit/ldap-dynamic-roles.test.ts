import { describe, expect, it } from 'vitest';
import { BadRequestError } from '../../src/core/errors.ts';
import { parseLdif } from '../../src/lib/ldif/index.ts';
import { checkRecordDns, mergeDynamicRole, validateDynamicRole, type DynamicRole } from '../../src/engines/ldap/dynamic-roles.ts';
import { DynamicTemplates } from '../../src/engines/ldap/dynamic-templates.ts';

const templates = new DynamicTemplates(() => Date.UTC(2030, 0, 1));
const CREATE = 'dn: cn={{.Username}},ou=users,dc=x\nobjectClass: person\ncn: {{.Username}}\nsn: {{.DisplayName}}\n';
const DELETE = 'dn: cn={{.Username}},ou=users,dc=x\nchangetype: delete\n';

function role(overrides: Partial<DynamicRole> = {}): DynamicRole {
  return { creation_ldif: CREATE, deletion_ldif: DELETE, rollback_ldif: '', username_template: '', default_ttl: 0, max_ttl: 0, ...overrides };
}

function validate(r: DynamicRole, mountMaxTtl = 86_400): void {
  validateDynamicRole(r, { name: 'dev', templates, nowMs: Date.UTC(2030, 0, 1), mountMaxTtl });
}

describe('validateDynamicRole', () => {
  it.each<[string, Partial<DynamicRole>, number | undefined, RegExp]>([
    ['creation_ldif is required', { creation_ldif: '' }, undefined, /^missing required field "creation_ldif"$/],
    ['deletion_ldif is required', { deletion_ldif: '' }, undefined, /^missing required field "deletion_ldif"$/],
    ['a template parse error names the field and position', { creation_ldif: 'dn: x\n{{if}}' }, undefined, /field "creation_ldif": template error at line 2, column \d+/],
    ['LDIF that does not parse is refused per field', { rollback_ldif: 'foo bar' }, undefined, /field "rollback_ldif": rendered LDIF is invalid: LDIF line 1/],
    ['modrdn is refused', { deletion_ldif: 'dn: cn=x,dc=x\nchangetype: modrdn\nnewrdn: cn=y\ndeleteoldrdn: 1\n' }, undefined, /field "deletion_ldif".*modrdn/],
    [':< URL values are refused', { creation_ldif: 'dn: cn=x,dc=x\nobjectClass: person\ndescription:< file:///etc/passwd\n' }, undefined, /field "creation_ldif"/],
    ['an unknown field is an execution error at write', { deletion_ldif: 'dn: cn={{.Nope}},dc=x\nchangetype: delete\n' }, undefined, /field "deletion_ldif".*Nope/],
    ['the username template is checked at write', { username_template: '{{.RoleName' }, undefined, /field "username_template": template error at line 1/],
    ['username_template may not use utf16le', { username_template: '{{.RoleName | utf16le}}' }, undefined, /field "username_template".*utf16le/],
    ['max_ttl may not exceed the mount maximum', { max_ttl: 90_000 }, 86_400, /field "max_ttl": 90000s is longer than the mount's maximum lease TTL of 86400s/],
    ['default_ttl may not exceed max_ttl', { default_ttl: 600, max_ttl: 300 }, undefined, /field "default_ttl": 600s is longer than max_ttl \(300s\)/],
  ])('%s', (_rule, overrides, mountMax, message) => {
    let caught: unknown;
    try {
      validate(role(overrides), mountMax);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(BadRequestError);
    expect((caught as Error).message).toMatch(message);
  });

  it.each<[string, Partial<DynamicRole>]>([
    ['a minimal role', {}],
    ['several records, including a group modify', { creation_ldif: `${CREATE}\ndn: cn=staff,ou=groups,dc=x\nchangetype: modify\nadd: member\nmember: cn={{.Username}},ou=users,dc=x\n-\n` }],
    ['a rollback LDIF', { rollback_ldif: DELETE }],
    ['TTLs within the mount', { default_ttl: 300, max_ttl: 3600 }],
    ['default_ttl above the mount maximum without max_ttl (clamped at issue)', { default_ttl: 100_000 }],
    ['a custom username template', { username_template: 'v.{{random 10}}.{{.RoleName}}.{{unix_time}}.{{.DisplayName}}' }],
  ])('accepts %s', (_case, overrides) => {
    expect(() => validate(role(overrides))).not.toThrow();
  });
});

describe('checkRecordDns with the DNs a request already checked', () => {
  const bind = { username: 'engine', dn: 'cn=Engine,ou=svc,dc=x' };
  const records = (dn: string) => parseLdif(`dn: ${dn}\nchangetype: delete\n`);

  it('"a DN that passed is not checked again, and every DN that passes is remembered"', () => {
    const passed = new Set<string>();
    checkRecordDns('creation_ldif', parseLdif('dn: cn=a,ou=users,dc=x\nchangetype: delete\n\ndn: cn=g,dc=x\nchangetype: delete\n'), bind, passed);
    expect([...passed]).toEqual(['cn=a,ou=users,dc=x', 'cn=g,dc=x']);
    expect(() => checkRecordDns('deletion_ldif', records('cn=a,ou=users,dc=x'), bind, passed)).not.toThrow();
  });

  // Only the exact DN string that passed is skipped: every other spelling is parsed, normalised and compared again.
  it.each(['cn=Engine,ou=svc,dc=x', 'CN=engine,OU=SVC,DC=X', 'cn = Engine , ou=svc,dc=x', 'cn=\\45ngine,ou=svc,dc=x', 'cn=engine,ou=svc,dc=x'])(
    '"the bind account is refused whatever passed before": %s', (dn) => {
      const passed = new Set(['cn=a,ou=users,dc=x', 'cn=g,dc=x']);
      expect(() => checkRecordDns('rollback_ldif', records(dn), bind, passed)).toThrow(/field "rollback_ldif": the record at line 1 is the account this secrets engine binds as/);
      expect(passed.has(dn)).toBe(false);
    });

  it('"a DN that is not valid is refused and not remembered"', () => {
    const passed = new Set<string>();
    expect(() => checkRecordDns('creation_ldif', [{ ...records('cn=a,dc=x')[0]!, dn: 'not a dn' }], bind, passed)).toThrow(/not valid/);
    expect(passed.size).toBe(0);
  });
});

describe('mergeDynamicRole (partial update)', () => {
  const sent = (body: Record<string, unknown>) => ({ data: body as never, has: (name: string) => name in body });

  it('only the keys sent change', () => {
    const merged = mergeDynamicRole(role({ rollback_ldif: DELETE, default_ttl: 60, max_ttl: 120 }), sent({ default_ttl: 90 }));
    expect(merged).toEqual(role({ rollback_ldif: DELETE, default_ttl: 90, max_ttl: 120 }));
  });

  it('"" clears optional keys and empties required ones (which validation then refuses)', () => {
    const merged = mergeDynamicRole(role({ rollback_ldif: DELETE, username_template: '{{.RoleName}}', default_ttl: 60 }), sent({ rollback_ldif: '', username_template: '', default_ttl: 0, creation_ldif: '' }));
    expect(merged).toMatchObject({ rollback_ldif: '', username_template: '', default_ttl: 0, creation_ldif: '' });
  });

  it('LDIF sent base64 encoded is stored decoded', () => {
    const merged = mergeDynamicRole(undefined, sent({ creation_ldif: Buffer.from(CREATE).toString('base64'), deletion_ldif: DELETE }));
    expect(merged.creation_ldif).toBe(CREATE);
    expect(merged.deletion_ldif).toBe(DELETE);
  });
});
