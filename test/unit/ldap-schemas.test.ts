import { describe, expect, it } from 'vitest';
import { defaultUserAttr, encodeAdPassword, passwordChanges } from '../../src/providers/ldap/schemas.ts';

describe('password modify request per schema', () => {
  it('openldap replaces userPassword with the plaintext', () => {
    expect(passwordChanges('openldap', 'S3cret!')).toEqual([
      { operation: 'replace', attribute: { name: 'userPassword', values: ['S3cret!'] } },
    ]);
  });

  it('ad replaces unicodePwd with the quoted password in UTF-16LE, no BOM', () => {
    const changes = passwordChanges('ad', 'Ab1');
    expect(changes).toHaveLength(1);
    expect(changes[0]!.operation).toBe('replace');
    expect(changes[0]!.attribute.name).toBe('unicodePwd');
    const value = changes[0]!.attribute.values[0] as Buffer;
    expect(Buffer.isBuffer(value)).toBe(true);
    // "Ab1" -> 0x22 0x00 'A' 0x00 'b' 0x00 '1' 0x00 0x22 0x00
    expect([...value]).toEqual([0x22, 0x00, 0x41, 0x00, 0x62, 0x00, 0x31, 0x00, 0x22, 0x00]);
  });

  it('ad encodes non-ASCII characters as UTF-16LE code units (surrogate pairs included)', () => {
    expect([...encodeAdPassword('é')]).toEqual([0x22, 0x00, 0xe9, 0x00, 0x22, 0x00]);
    expect([...encodeAdPassword('😀')]).toEqual([0x22, 0x00, 0x3d, 0xd8, 0x00, 0xde, 0x22, 0x00]);
    // A quote inside the password is sent as is; AD takes the outer pair as delimiters.
    expect(encodeAdPassword('a"b').toString('utf16le')).toBe('"a"b"');
  });

  it('racf replaces racfPassword and sets racfAttributes to noexpired', () => {
    expect(passwordChanges('racf', 'PW12345')).toEqual([
      { operation: 'replace', attribute: { name: 'racfPassword', values: ['PW12345'] } },
      { operation: 'replace', attribute: { name: 'racfAttributes', values: ['noexpired'] } },
    ]);
  });

  it('racf with credential_type phrase writes racfPassPhrase instead', () => {
    expect(passwordChanges('racf', 'a long pass phrase', 'phrase')).toEqual([
      { operation: 'replace', attribute: { name: 'racfPassPhrase', values: ['a long pass phrase'] } },
      { operation: 'replace', attribute: { name: 'racfAttributes', values: ['noexpired'] } },
    ]);
  });

  it.each([
    ['openldap', 'cn'],
    ['ad', 'userPrincipalName'],
    ['racf', 'racfid'],
  ] as const)('default userattr for %s is %s', (schema, attr) => {
    expect(defaultUserAttr(schema)).toBe(attr);
  });
});
