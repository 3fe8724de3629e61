/**
 * What a password change writes, per directory schema. Pure functions so the exact modify request
 * (down to the bytes of AD's unicodePwd) is unit-tested without a directory.
 */
import type { LdifModification } from '../../lib/ldif/types.ts';

export const LDAP_SCHEMAS = ['openldap', 'racf', 'ad'] as const;
export type LdapSchemaName = (typeof LDAP_SCHEMAS)[number];
export type CredentialType = 'password' | 'phrase';

export function isLdapSchema(value: string): value is LdapSchemaName {
  return (LDAP_SCHEMAS as readonly string[]).includes(value);
}

/** userattr used when the config does not name one. */
export function defaultUserAttr(schema: LdapSchemaName): string {
  switch (schema) {
    case 'openldap': return 'cn';
    case 'ad': return 'userPrincipalName';
    case 'racf': return 'racfid';
  }
}

/** AD only accepts unicodePwd as the quoted password in UTF-16LE, without a byte-order mark. */
export function encodeAdPassword(password: string): Buffer {
  return Buffer.from(`"${password}"`, 'utf16le');
}

export function passwordChanges(schema: LdapSchemaName, password: string, credentialType: CredentialType = 'password'): LdifModification[] {
  switch (schema) {
    case 'openldap':
      // Plaintext: hashing is the server's job (ppolicy olcPPolicyHashCleartext), as in Vault.
      return [{ operation: 'replace', attribute: { name: 'userPassword', values: [password] } }];
    case 'ad':
      return [{ operation: 'replace', attribute: { name: 'unicodePwd', values: [encodeAdPassword(password)] } }];
    case 'racf':
      // RACF expires a password set by an administrator unless told otherwise; noexpired keeps it usable.
      return [
        { operation: 'replace', attribute: { name: credentialType === 'phrase' ? 'racfPassPhrase' : 'racfPassword', values: [password] } },
        { operation: 'replace', attribute: { name: 'racfAttributes', values: ['noexpired'] } },
      ];
  }
}
