// How JavaScript values stand in for Go values:
//   undefined            -> Go's "no value" (a missing map key, nil data): prints "<no value>"
//   null                 -> a nil interface
//   boolean, string      -> bool, string; a Buffer is a string of raw bytes (what Vault's utf16le returns)
//   number               -> int when integral, float64 otherwise (JS cannot tell 1 from 1.0)
//   Array                -> slice
//   Map                  -> map: a missing key is "<no value>", range visits keys in sorted order
//   function             -> func (callable with `call`)
//   any other object     -> struct: its own properties are fields (a missing one is an exec error,
//                          "can't evaluate field X") and inherited functions (class methods) are methods.
// So template data such as {Username, Password} behaves like Vault's Go struct; wrap data in a Map
// where Go would have used a map.

export type Kind = 'invalid' | 'nil' | 'bool' | 'int' | 'float' | 'string' | 'array' | 'map' | 'func' | 'struct';

export function kindOf(v: unknown): Kind {
  if (v === undefined) return 'invalid';
  if (v === null) return 'nil';
  switch (typeof v) {
    case 'boolean':
      return 'bool';
    case 'number':
      return Number.isInteger(v) ? 'int' : 'float';
    case 'bigint':
      return 'int';
    case 'string':
      return 'string';
    case 'function':
      return 'func';
  }
  if (Buffer.isBuffer(v)) return 'string';
  if (Array.isArray(v)) return 'array';
  if (v instanceof Map) return 'map';
  return 'struct';
}

/** Go type names as they appear in %T and error messages. */
export function typeName(v: unknown): string {
  const kind = kindOf(v);
  switch (kind) {
    case 'invalid':
    case 'nil':
      return '<nil>';
    case 'float':
      return 'float64';
    case 'array':
      return '[]interface {}';
    case 'map':
      return 'map[string]interface {}';
    case 'func':
      return 'func';
    case 'struct': {
      const ctor = (v as object).constructor?.name;
      return ctor && ctor !== 'Object' ? ctor : 'struct';
    }
    default:
      return kind;
  }
}

/** The text of a Go string value (a Buffer is decoded as UTF-8, as a terminal would show it). */
export function stringOf(v: string | Buffer): string {
  return typeof v === 'string' ? v : v.toString('utf8');
}

/** The bytes of a Go string value: Go's len, index and slice count bytes. */
export function bytesOf(v: string | Buffer): Buffer {
  return typeof v === 'string' ? Buffer.from(v, 'utf8') : v;
}

/** Go's template truth: the zero value of any type is false; structs are always true. */
export function truth(v: unknown): boolean {
  switch (kindOf(v)) {
    case 'invalid':
    case 'nil':
      return false;
    case 'bool':
      return v as boolean;
    case 'int':
    case 'float':
      return Number(v) !== 0;
    case 'string':
      return (v as string | Buffer).length > 0;
    case 'array':
      return (v as unknown[]).length > 0;
    case 'map':
      return (v as Map<unknown, unknown>).size > 0;
    default:
      return true;
  }
}

/** Map entries in Go's fmtsort order: numbers numerically, strings by bytes, false before true. */
export function sortedEntries(m: Map<unknown, unknown>): Array<[unknown, unknown]> {
  return [...m.entries()].sort(([a], [b]) => compareKeys(a, b));
}

function compareKeys(a: unknown, b: unknown): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  const sa = String(a);
  const sb = String(b);
  return Buffer.compare(Buffer.from(sa), Buffer.from(sb));
}

/** The fields of a struct-like object, in declaration (insertion) order. */
export function structFields(v: object): Array<[string, unknown]> {
  return Object.entries(v).filter(([, value]) => typeof value !== 'function');
}

/** Whether `name` is a field or method of a struct-like value (own or inherited, never Object's). */
export function hasMember(v: object, name: string): boolean {
  return Object.hasOwn(v, name) || (name in v && !(name in Object.prototype));
}
