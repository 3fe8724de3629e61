/** Parsed RFC 2849 change records; values stay bytes-or-text so `::` base64 binary survives. */
export interface LdifAttribute {
  name: string;
  values: Array<string | Buffer>;
}

export interface LdifModification {
  operation: 'add' | 'replace' | 'delete';
  attribute: LdifAttribute;
}

export type LdifRecord =
  | { changetype: 'add'; dn: string; attributes: LdifAttribute[]; line: number }
  | { changetype: 'delete'; dn: string; line: number }
  | { changetype: 'modify'; dn: string; changes: LdifModification[]; line: number };
