import { describe, expect, it } from 'vitest';
import { BadRequestError } from '../../src/core/errors.ts';
import {
  decodeLdifInput,
  DEFAULT_USERNAME_TEMPLATE,
  DynamicTemplates,
  LDIF_TEMPLATE_MAX_LENGTH,
  renderLdifTemplate,
  USERNAME_TEMPLATE_MAX_LENGTH,
  type LdifTemplateData,
} from '../../src/engines/ldap/dynamic-templates.ts';

const NOW = Date.UTC(2030, 0, 1, 12, 0, 0);
const templates = new DynamicTemplates(() => NOW);

function data(overrides: Partial<LdifTemplateData> = {}): LdifTemplateData {
  return {
    Username: 'v_alice_dev_abc', Password: 'S3cret-pass', RoleName: 'dev', DisplayName: 'alice',
    IssueTime: '2030-01-01T12:00:00.000Z', IssueTimeSeconds: NOW / 1000,
    ExpirationTime: '2030-01-01T13:00:00.000Z', ExpirationTimeSeconds: NOW / 1000 + 3600,
    ...overrides,
  };
}

function badRequest(fn: () => unknown): BadRequestError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(BadRequestError);
    return err as BadRequestError;
  }
  throw new Error('expected a BadRequestError');
}

const USER_LDIF = 'dn: cn={{.Username}},ou=users,dc=x\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: {{.DisplayName}}\nuserPassword: {{.Password}}\n';

describe('username template', () => {
  it('default template: v_<display name>_<role name>_<10 random characters>_<unix seconds>', () => {
    const name = templates.renderUsername(templates.username(DEFAULT_USERNAME_TEMPLATE), { DisplayName: 'token-dispname', RoleName: 'testrole' });
    expect(name).toMatch(new RegExp(`^v_token-dispname_testrole_[a-zA-Z0-9]{10}_${NOW / 1000}$`));
  });

  it('dashes, underscores and slashes of hierarchical names are kept unless the template changes them', () => {
    const t = templates.username('{{.RoleName}}.{{.DisplayName | replace "-" ""}}');
    expect(templates.renderUsername(t, { DisplayName: 'a-b_c', RoleName: 'org/secure' })).toBe('org/secure.ab_c');
  });

  it('utf16le exists only in LDIF templates', () => {
    const err = badRequest(() => templates.username('{{.DisplayName | utf16le}}'));
    expect(err.message).toMatch(/field "username_template".*line 1, column \d+.*utf16le/);
    expect(() => templates.ldif('creation_ldif', '{{.Password | utf16le | base64}}')).not.toThrow();
  });

  it('parse errors are 400s naming the field, line and column', () => {
    const err = badRequest(() => templates.ldif('creation_ldif', 'dn: cn=x\ncn: {{ .Username | nosuchfunc }}\n'));
    expect(err.status).toBe(400);
    expect(err.message).toMatch(/^invalid value for field "creation_ldif": template error at line 2, column \d+: .*nosuchfunc/);
  });

  it.each([
    ['a newline', 'x\ndn: cn=admin', /"\\n"/],
    ['a comma that would move the DN to another branch', 'x,ou=admins', /","/],
    ['an equals sign', 'cn=x', /"="/],
    ['a plus (multi-valued RDN)', 'x+uid=root', /"\+"/],
  ])('a generated username containing %s is refused', (_rule, displayName, shown) => {
    const err = badRequest(() => templates.renderUsername(templates.username(DEFAULT_USERNAME_TEMPLATE), { DisplayName: displayName, RoleName: 'dev' }));
    expect(err.message).toMatch(/field "username_template": the generated username contains/);
    expect(err.message).toMatch(shown);
  });

  it('an empty or space-edged username is refused', () => {
    expect(badRequest(() => templates.renderUsername(templates.username('{{.DisplayName}}'), { DisplayName: '', RoleName: 'r' })).message).toMatch(/empty/);
    expect(badRequest(() => templates.renderUsername(templates.username('{{.DisplayName}}'), { DisplayName: ' x', RoleName: 'r' })).message).toMatch(/space/);
  });

  it('a colon or "dn:" in a username is harmless inside a DN value and allowed', () => {
    expect(templates.renderUsername(templates.username('{{.DisplayName}}'), { DisplayName: 'dn:x', RoleName: 'r' })).toBe('dn:x');
  });

  it('an unknown field is an execution error (400), not "<no value>"', () => {
    expect(badRequest(() => templates.renderUsername(templates.username('{{.Nope}}'), { DisplayName: 'a', RoleName: 'r' })).message).toMatch(/field "username_template".*Nope/);
  });
});

describe('LDIF rendering', () => {
  it('renders every spec field and parses the result', () => {
    const t = templates.ldif('creation_ldif', `${USER_LDIF}description: {{.RoleName}} {{.IssueTime}} {{.IssueTimeSeconds}} {{.ExpirationTime}} {{.ExpirationTimeSeconds}}\n`);
    const { records, text } = renderLdifTemplate('creation_ldif', t, data());
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({ changetype: 'add', dn: 'cn=v_alice_dev_abc,ou=users,dc=x' });
    expect(text).toContain(`description: dev 2030-01-01T12:00:00.000Z ${NOW / 1000} 2030-01-01T13:00:00.000Z ${NOW / 1000 + 3600}`);
  });

  it('{{.DisplayName | utf16le | base64}} of "token" is dABvAGsAZQBuAA== (as in Vault)', () => {
    const t = templates.ldif('creation_ldif', 'dn: cn=x,dc=x\nchangetype: modify\nreplace: unicodePwd\nunicodePwd:: {{.DisplayName | utf16le | base64}}\n-\n');
    const { records } = renderLdifTemplate('creation_ldif', t, data({ DisplayName: 'token' }));
    expect(records[0]).toMatchObject({ changetype: 'modify', changes: [{ operation: 'replace', attribute: { name: 'unicodePwd' } }] });
    const value = (records[0] as { changes: Array<{ attribute: { values: Buffer[] } }> }).changes[0].attribute.values[0];
    expect(Buffer.from(value).toString('base64')).toBe('dABvAGsAZQBuAA==');
  });

  it.each([
    ['display name with a newline adding an attribute', { DisplayName: 'x\nuid: 0' }, /\{\{\.DisplayName\}\} contains a line break/],
    ['display name with CRLF starting a new record', { DisplayName: 'x\r\n\r\ndn: cn=admin,dc=x\nchangetype: delete' }, /line break/],
    ['username with a newline and dn:', { Username: 'u\ndn: cn=admin,dc=x' }, /\{\{\.Username\}\} contains a line break/],
  ])('injection: %s is a 400 that names the action, not the value', (_case, override, rule) => {
    const t = templates.ldif('creation_ldif', USER_LDIF);
    const err = badRequest(() => renderLdifTemplate('creation_ldif', t, data(override)));
    expect(err.message).toMatch(/^invalid value for field "creation_ldif": /);
    expect(err.message).toMatch(rule);
    expect(err.message).not.toContain('admin');
  });

  it('injection: a value in the attribute-name position cannot contain ":"', () => {
    const t = templates.ldif('creation_ldif', 'dn: cn=x,dc=x\nobjectClass: top\n{{.DisplayName}}: y\n');
    expect(badRequest(() => renderLdifTemplate('creation_ldif', t, data({ DisplayName: 'changetype: delete\ncn' }))).message).toMatch(/line break|":"/);
    expect(badRequest(() => renderLdifTemplate('creation_ldif', t, data({ DisplayName: 'dn:cn' }))).message).toMatch(/":" in an attribute name/);
  });

  it('a colon or "dn:" inside a value stays part of the value', () => {
    const t = templates.ldif('creation_ldif', USER_LDIF);
    const { records } = renderLdifTemplate('creation_ldif', t, data({ DisplayName: 'dn: cn=admin:x' }));
    expect(records).toHaveLength(1);
    const sn = (records[0] as { attributes: Array<{ name: string; values: string[] }> }).attributes.find((a) => a.name === 'sn');
    expect(sn?.values).toEqual(['dn: cn=admin:x']);
  });

  it('rendered LDIF that does not parse is a 400 with the LDIF line', () => {
    const t = templates.ldif('deletion_ldif', 'foo bar');
    expect(badRequest(() => renderLdifTemplate('deletion_ldif', t, data())).message).toMatch(/^invalid value for field "deletion_ldif": rendered LDIF is invalid: LDIF line 1: /);
  });
});

describe('template limits', () => {
  /** `text` padded with an LDIF comment line to exactly `length` characters. */
  const padded = (text: string, length: number): string => `${text}#${'x'.repeat(length - text.length - 2)}\n`;

  it.each([
    ['creation_ldif', LDIF_TEMPLATE_MAX_LENGTH],
    ['deletion_ldif', LDIF_TEMPLATE_MAX_LENGTH],
    ['rollback_ldif', LDIF_TEMPLATE_MAX_LENGTH],
  ])('%s may be %i characters long; one more is a 400 naming the field', (field, max) => {
    expect(() => templates.ldif(field, padded(USER_LDIF, max))).not.toThrow();
    const err = badRequest(() => templates.ldif(field, padded(USER_LDIF, max + 1)));
    expect(err.message).toMatch(new RegExp(`^invalid value for field "${field}": template limit reached at line \\d+, column \\d+: template text exceeded the limit of ${max} characters$`));
  });

  it(`username_template may be ${USERNAME_TEMPLATE_MAX_LENGTH} characters long; one more is a 400 naming the field`, () => {
    const text = (length: number): string => `{{/*${'x'.repeat(length - 9)}*/}}v`;
    expect(templates.renderUsername(templates.username(text(USERNAME_TEMPLATE_MAX_LENGTH)), { DisplayName: 'a', RoleName: 'r' })).toBe('v');
    expect(badRequest(() => templates.username(text(USERNAME_TEMPLATE_MAX_LENGTH + 1))).message).toMatch(/^invalid value for field "username_template": template limit reached at .*: template text exceeded the limit of 1024 characters$/);
  });

  const bombs: Array<[string, string, RegExp]> = [
    ['{{range 300000000}}', '{{range 300000000}}{{end}}', /evaluation exceeded the limit of 100000 steps/],
    ['nested ranges', '{{range 100000}}{{range 100000}}{{end}}{{end}}', /evaluation exceeded the limit of 100000 steps/],
    ['random 100000000', '{{random 100000000}}', /random: length exceeded the limit of 1024/],
    ['a huge printf width', '{{printf "%1000000000d" 1}}', /printf: width exceeded the limit of 1024/],
    ['an output bomb', '{{range 300000000}}xxxxxxxxxxxxxxxx{{end}}', /output exceeded the limit of 32768 characters/],
    ['parentheses 101 deep', `{{${'('.repeat(101)}1${')'.repeat(101)}}}`, /nesting exceeded the limit of 100 levels/],
  ];
  // 101 nested {{if}} take more text than a username template may have.
  const ldifBombs: typeof bombs = [...bombs, ['{{if}} 101 deep', `${'{{if 1}}'.repeat(101)}${'{{end}}'.repeat(101)}`, /nesting exceeded the limit of 100 levels/]];

  it.each(ldifBombs)('LDIF: %s is a 400 naming the field and the limit', (_name, bomb, reason) => {
    const err = badRequest(() => renderLdifTemplate('rollback_ldif', templates.ldif('rollback_ldif', `${USER_LDIF}description: ${bomb}\n`), data()));
    expect(err.message).toMatch(/^invalid value for field "rollback_ldif": template limit reached at line \d+, column \d+: /);
    expect(err.message).toMatch(reason);
  });

  it.each(bombs)('username: %s is a 400 naming the field and the limit', (_name, bomb, reason) => {
    const err = badRequest(() => templates.renderUsername(templates.username(`v_${bomb}`), { DisplayName: 'a', RoleName: 'r' }));
    expect(err.message).toMatch(/^invalid value for field "username_template": template limit reached at /);
    expect(err.message).toMatch(reason);
  });

  it('a template that passes with sample data but not with a long display name is a 400 naming the field, without the name', () => {
    // len³ iterations: 3,375 for a 15-character name, a million for a 100-character one.
    const cube = '{{range len .DisplayName}}{{range len $.DisplayName}}{{range len $.DisplayName}}{{end}}{{end}}{{end}}';
    const t = templates.ldif('creation_ldif', `${USER_LDIF}${cube}`);
    expect(() => renderLdifTemplate('creation_ldif', t, data({ DisplayName: 'testdisplayname' }))).not.toThrow();
    const displayName = `long-${'n'.repeat(95)}`;
    const err = badRequest(() => renderLdifTemplate('creation_ldif', t, data({ DisplayName: displayName })));
    expect(err.message).toMatch(/^invalid value for field "creation_ldif": template limit reached at line 6, column \d+: evaluation exceeded the limit of 100000 steps$/);
    expect(err.message).not.toContain(displayName);
  });
});

describe('compiled template reuse', () => {
  it('the same text compiles once and renders fresh values (random, time) every time; another text or field is compiled anew', () => {
    let now = NOW;
    const t = new DynamicTemplates(() => now);
    const username = t.username(DEFAULT_USERNAME_TEMPLATE);
    expect(t.username(DEFAULT_USERNAME_TEMPLATE)).toBe(username);
    const first = t.renderUsername(username, { DisplayName: 'a', RoleName: 'r' });
    now += 5_000;
    const second = t.renderUsername(t.username(DEFAULT_USERNAME_TEMPLATE), { DisplayName: 'a', RoleName: 'r' });
    expect(second).not.toBe(first);
    expect(second.endsWith(`_${NOW / 1000 + 5}`)).toBe(true);
    expect(t.ldif('creation_ldif', USER_LDIF)).toBe(t.ldif('creation_ldif', USER_LDIF));
    expect(t.ldif('deletion_ldif', USER_LDIF)).not.toBe(t.ldif('creation_ldif', USER_LDIF));
  });

  it('a text that does not parse is refused every time, naming its field', () => {
    const t = new DynamicTemplates(() => NOW);
    for (let i = 0; i < 2; i++) expect(badRequest(() => t.ldif('rollback_ldif', 'dn: {{.Username')).message).toMatch(/"rollback_ldif": template error/);
  });
});

describe('base64 input detection', () => {
  it.each([
    ['plain LDIF is never base64', USER_LDIF, USER_LDIF],
    ['padded standard base64 is decoded', Buffer.from(USER_LDIF).toString('base64'), USER_LDIF],
    ['line breaks inside base64 are ignored', Buffer.from(USER_LDIF).toString('base64').replace(/(.{20})/g, '$1\n'), USER_LDIF],
    ['unpadded input is not base64', 'YWJj', 'abc'],
    ['a length that is not a multiple of 4 stays raw', 'YWJjZA', 'YWJjZA'],
    ['decoding to non-UTF-8 bytes keeps the raw text', '////', '////'],
    ['an empty string stays empty', '', ''],
  ])('%s', (_rule, input, expected) => {
    expect(decodeLdifInput(input)).toBe(expected);
  });
});
