import { describe, expect, it } from 'vitest';
import { parseTemplate, vaultFuncs } from '../../src/lib/gotemplate/index.ts';
import { LdifInjectionError, LdifParseError, parseLdif, renderLdif } from '../../src/lib/ldif/index.ts';

describe('parseLdif: RFC 2849 features', () => {
  it('a content record (no changetype) is an add; repeated attributes gather values; options stay in the name', () => {
    const records = parseLdif('dn: cn=a,dc=x\nobjectClass: top\nobjectClass: person\ncn;lang-en: Alice\nsn: A\n');
    expect(records).toEqual([
      {
        changetype: 'add',
        dn: 'cn=a,dc=x',
        line: 1,
        attributes: [
          { name: 'objectClass', values: ['top', 'person'] },
          { name: 'cn;lang-en', values: ['Alice'] },
          { name: 'sn', values: ['A'] },
        ],
      },
    ]);
  });

  it('version line, several records, comments, CRLF and folding', () => {
    const text = [
      'version: 1',
      '# a comment',
      '#  folded comment line',
      ' that continues here',
      'dn: cn=a,',
      ' dc=x',
      'changetype: add',
      'description: one long',
      '  value',
      '',
      '',
      'dn: cn=b,dc=x',
      'changetype: delete',
      '',
    ].join('\r\n');
    expect(parseLdif(text)).toEqual([
      { changetype: 'add', dn: 'cn=a,dc=x', line: 5, attributes: [{ name: 'description', values: ['one long value'] }] },
      { changetype: 'delete', dn: 'cn=b,dc=x', line: 12 },
    ]);
  });

  it('modify with add, replace and delete blocks, including a delete of the whole attribute', () => {
    const text = [
      'dn: cn=g,dc=x',
      'changetype: modify',
      'add: member',
      'member: cn=a,dc=x',
      'member: cn=b,dc=x',
      '-',
      'replace: description',
      'description: new',
      '-',
      'delete: telephoneNumber',
      '-',
    ].join('\n');
    expect(parseLdif(text)).toEqual([
      {
        changetype: 'modify',
        dn: 'cn=g,dc=x',
        line: 1,
        changes: [
          { operation: 'add', attribute: { name: 'member', values: ['cn=a,dc=x', 'cn=b,dc=x'] } },
          { operation: 'replace', attribute: { name: 'description', values: ['new'] } },
          { operation: 'delete', attribute: { name: 'telephoneNumber', values: [] } },
        ],
      },
    ]);
  });

  it('base64 values: text when UTF-8, bytes otherwise; base64 dn', () => {
    const unicodePwd = Buffer.from('"pw"', 'utf16le').toString('base64');
    const binary = Buffer.from([0xff, 0xfe, 0x00, 0x80]);
    const [record] = parseLdif(
      `dn:: ${Buffer.from('cn=José,dc=x').toString('base64')}\nunicodePwd::${unicodePwd}\njpegPhoto:: ${binary.toString('base64')}\n`,
    );
    expect(record).toMatchObject({ changetype: 'add', dn: 'cn=José,dc=x' });
    if (record.changetype !== 'add') throw new Error('expected add');
    expect(record.attributes[0].values[0]).toBe('"\0p\0w\0"\0');
    expect(Buffer.isBuffer(record.attributes[1].values[0])).toBe(true);
    expect(record.attributes[1].values[0]).toEqual(binary);
  });

  it('changetype never carries over to the next record', () => {
    const records = parseLdif('dn: cn=a,dc=x\nchangetype: delete\n\ndn: cn=b,dc=x\ncn: b\n');
    expect(records.map((r) => r.changetype)).toEqual(['delete', 'add']);
  });
});

describe('parseLdif: refusals', () => {
  const cases: Array<[string, string, number, string]> = [
    ['URL value', 'dn: cn=a,dc=x\njpegPhoto:< file:///etc/passwd\n', 2, 'URL values (":<") are not accepted'],
    ['modrdn', 'dn: cn=a,dc=x\nchangetype: modrdn\nnewrdn: cn=b\ndeleteoldrdn: 1\n', 2, 'changetype modrdn is not supported'],
    ['moddn', 'dn: cn=a,dc=x\nchangetype: moddn\nnewrdn: cn=b\n', 2, 'changetype moddn is not supported'],
    ['unknown changetype', 'dn: cn=a,dc=x\nchangetype: rename\n', 2, 'invalid changetype "rename"'],
    ['record without dn', 'cn: a\nsn: b\n', 1, 'a record must start with "dn:"'],
    ['dn only', 'dn: cn=a,dc=x\n', 1, 'a record needs attributes or a changetype'],
    ['attributes on delete', 'dn: cn=a,dc=x\nchangetype: delete\ncn: a\n', 3, 'changetype delete takes no attributes'],
    ['modify block not closed', 'dn: cn=a,dc=x\nchangetype: modify\nreplace: sn\nsn: b\n', 4, 'must end with a "-" line'],
    ['wrong attribute inside a modify block', 'dn: cn=a,dc=x\nchangetype: modify\nreplace: sn\ncn: b\n-\n', 4, 'attribute "cn" inside a replace: sn block'],
    ['invalid modify operation', 'dn: cn=a,dc=x\nchangetype: modify\nincrement: uid\n-\n', 3, 'invalid modify operation "increment"'],
    ['line without colon', 'dn: cn=a,dc=x\nobjectClass top\n', 2, 'no colon found'],
    ['bad attribute name', 'dn: cn=a,dc=x\nmy attr: v\n', 2, 'invalid attribute description "my attr"'],
    ['bad base64', 'dn: cn=a,dc=x\ncn:: ***\n', 2, 'invalid base64 value'],
    ['empty value', 'dn: cn=a,dc=x\ncn:\n', 2, 'empty value for attribute "cn"'],
    ['wrong version', 'version: 2\ndn: cn=a,dc=x\ncn: a\n', 1, 'unsupported LDIF version'],
    ['control', 'dn: cn=a,dc=x\ncontrol: 1.2.840.113556.1.4.805 true\nchangetype: delete\n', 2, 'controls are not supported'],
    ['changetype later in the record', 'dn: cn=a,dc=x\ncn: a\nchangetype: delete\n', 3, 'changetype must directly follow the dn'],
    ['nothing at all', '# only a comment\n\n', 1, 'no records'],
    ['continuation without a line', '\n continued\n', 2, 'continuation line'],
  ];
  it.each(cases)('%s', (_name, text, line, rule) => {
    let caught: unknown;
    try {
      parseLdif(text);
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(LdifParseError);
    expect((caught as LdifParseError).line).toBe(line);
    expect((caught as LdifParseError).message).toContain(`LDIF line ${line}: `);
    expect((caught as LdifParseError).message).toContain(rule);
  });
});

describe('renderLdif: template values cannot inject LDIF', () => {
  const funcs = vaultFuncs({ now: () => new Date(0), includeUtf16le: true });
  const creation = [
    'dn: cn={{.Username}},ou=users,dc=x',
    'objectClass: person',
    'cn: {{.Username}}',
    'sn:{{.DisplayName}}',
    'description: made for {{.DisplayName}}',
    'unicodePwd:: {{ .Password | utf16le | base64 }}',
    '',
    'dn: cn=group,dc=x',
    'changetype: modify',
    'add: member',
    'member: cn={{.Username}},ou=users,dc=x',
    '-',
  ].join('\n');
  const template = parseTemplate(creation, { name: 'creation_ldif', funcs });
  const data = (over: Record<string, string>): Record<string, string> => ({ Username: 'v_alice', DisplayName: 'alice', Password: 'pw', ...over });

  it('renders safe data into the intended two records', () => {
    const records = renderLdif(template, data({}));
    expect(records.map((r) => [r.changetype, r.dn])).toEqual([
      ['add', 'cn=v_alice,ou=users,dc=x'],
      ['modify', 'cn=group,dc=x'],
    ]);
    if (records[0].changetype !== 'add') throw new Error('expected add');
    expect(records[0].attributes.find((a) => a.name === 'unicodePwd')?.values).toEqual([Buffer.from('pw', 'utf16le').toString('utf8')]);
  });

  const attacks: Array<[string, Record<string, string>, string]> = [
    ['newline then a new record', { DisplayName: 'x\n\ndn: cn=admin,dc=x\nchangetype: delete' }, '{{.DisplayName}} contains a line break'],
    ['CRLF then a folded changetype', { Username: 'bob\r\n changetype: delete' }, '{{.Username}} contains a line break'],
    ['bare CR', { Username: 'bob\rcn: x' }, '{{.Username}} contains a line break'],
    ['NUL', { DisplayName: 'a\0b' }, '{{.DisplayName}} contains a line break or NUL'],
    ['colon right after "attr:" switches to base64', { DisplayName: ':YWRtaW4=' }, '{{.DisplayName}} starts a value with ":"'],
    ['"<" right after "attr:" switches to a URL', { DisplayName: '< file:///etc/shadow' }, '{{.DisplayName}} starts a value with "<"'],
    ['raw utf16le bytes contain NUL', {}, '{{.Password | utf16le}} contains a line break or NUL'],
  ];
  it.each(attacks)('%s is refused, naming the action but not the value', (_name, over, message) => {
    const t = _name.startsWith('raw utf16le') ? parseTemplate('dn: cn=a,dc=x\nunicodePwd: {{.Password | utf16le}}\n', { funcs }) : template;
    let caught: unknown;
    try {
      renderLdif(t, data(over));
    } catch (e) {
      caught = e;
    }
    expect(caught).toBeInstanceOf(LdifInjectionError);
    expect((caught as Error).message).toContain(message);
    for (const value of Object.values(over)) expect((caught as Error).message).not.toContain(value);
  });

  it('colons, "dn:" and leading spaces inside a value stay inside that value', () => {
    const records = renderLdif(template, data({ DisplayName: 'x dn: cn=admin: changetype: delete' }));
    expect(records).toHaveLength(2);
    if (records[0].changetype !== 'add') throw new Error('expected add');
    expect(records[0].attributes.map((a) => a.name)).toEqual(['objectClass', 'cn', 'sn', 'description', 'unicodePwd']);
    expect(records[0].attributes.find((a) => a.name === 'description')?.values).toEqual(['made for x dn: cn=admin: changetype: delete']);
  });

  it('a value standing where a line starts or an attribute is named cannot choose the line kind', () => {
    const lineStart = parseTemplate('dn: cn=a,dc=x\n{{.X}}\ncn: a\n');
    expect(() => renderLdif(lineStart, { X: 'changetype: delete' })).toThrow('contains ":" in an attribute name');
    expect(() => renderLdif(lineStart, { X: ' folded' })).toThrow('starts a line with " "');
    expect(() => renderLdif(lineStart, { X: '# hidden' })).toThrow('starts a line with "#"');
    expect(() => renderLdif(lineStart, { X: '-' })).toThrow('starts a line with "-"');
    expect(() => renderLdif(lineStart, { X: '' })).toThrow('is empty at the start of a line');
  });

  it('literal template text is never checked: the operator owns the structure', () => {
    const records = renderLdif(parseTemplate('# {{"note"}}\ndn: cn=a,dc=x\nchangetype: delete\n'), {});
    expect(records).toEqual([{ changetype: 'delete', dn: 'cn=a,dc=x', line: 2 }]);
  });
});
