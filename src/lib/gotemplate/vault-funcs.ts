// Vault's template helper functions (sdk/helper/template) plus the LDAP engine's utf16le, with
// Vault's argument order: the piped value comes last (`{{ .DisplayName | truncate 10 }}`).

import { createHash, randomBytes as cryptoRandomBytes } from 'node:crypto';
import { withArity, type FuncMap } from './builtins.ts';
import { ArgumentLimitError } from './errors.ts';
import { MAX_BUILT_LENGTH, MAX_RANDOM_LENGTH } from './limits.ts';
import { kindOf, stringOf, typeName } from './values.ts';
import { formatGoTime } from './time-layout.ts';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const SHA256_PREFIX = 8;

export interface VaultFuncOptions {
  now: () => Date;
  randomBytes?: (n: number) => Buffer;
  /** utf16le exists for LDIF templates only (unicodePwd), not for username templates. */
  includeUtf16le: boolean;
}

export function vaultFuncs(opts: VaultFuncOptions): FuncMap {
  const random = opts.randomBytes ?? cryptoRandomBytes;
  const funcs: FuncMap = {
    random: withArity((n) => {
      const length = positiveInt(n, 0);
      if (length > MAX_RANDOM_LENGTH) throw new ArgumentLimitError('length', MAX_RANDOM_LENGTH);
      return randomBase62(length, random);
    }, 1),
    truncate: withArity((max, value) => {
      const n = positiveInt(max, 0);
      return truncateBytes(str(value), n);
    }, 2),
    truncate_sha256: withArity((max, value) => {
      const n = positiveInt(max, SHA256_PREFIX);
      const s = str(value);
      if (Buffer.byteLength(s) <= n) return s;
      // Vault keeps the first n-8 bytes and appends the first 8 hex digits of the hash of the part cut off.
      const head = truncateBytes(s, n - SHA256_PREFIX);
      return head + sha256Hex(s.slice(head.length)).slice(0, SHA256_PREFIX);
    }, 2),
    uppercase: withArity((value) => str(value).toUpperCase(), 1),
    lowercase: withArity((value) => str(value).toLowerCase(), 1),
    replace: withArity((from, to, value) => replaceAll(str(value), str(from), str(to)), 3),
    sha256: withArity((value) => sha256Hex(bytes(value)), 1),
    base64: withArity((value) => bytes(value).toString('base64'), 1),
    unix_time: withArity(() => String(Math.floor(opts.now().getTime() / 1000)), 0),
    unix_time_millis: withArity(() => String(opts.now().getTime()), 0),
    timestamp: withArity((layout) => formatGoTime(opts.now(), str(layout)), 1),
    uuid: withArity(() => uuidV4(random(16)), 0),
  };
  if (opts.includeUtf16le) {
    // Bytes, not text: `{{ .Password | utf16le | base64 }}` is the intended use, for `unicodePwd::`.
    funcs.utf16le = withArity((value) => Buffer.from(str(value), 'utf16le'), 1);
  }
  return funcs;
}

function str(v: unknown): string {
  if (kindOf(v) !== 'string') throw new Error(`expected string; found ${typeName(v)}`);
  return stringOf(v as string | Buffer);
}

function bytes(v: unknown): Buffer {
  if (Buffer.isBuffer(v)) return v;
  return Buffer.from(str(v), 'utf8');
}

function positiveInt(v: unknown, above: number): number {
  if (kindOf(v) !== 'int') throw new Error(`expected integer; found ${typeName(v)}`);
  const n = Number(v);
  if (n <= above) throw new Error(`max length must be > ${above} but was ${n}`);
  return n;
}

/** Go slices strings by byte; stop at a character boundary so the result stays valid text. */
function truncateBytes(s: string, maxBytes: number): string {
  let used = 0;
  let out = '';
  for (const ch of s) {
    used += Buffer.byteLength(ch);
    if (used > maxBytes) break;
    out += ch;
  }
  return out;
}

/** The one Vault function whose result can outgrow its inputs many times over (each match may grow). */
function replaceAll(s: string, from: string, to: string): string {
  // An empty `from` matches before every UTF-16 unit and at the end.
  const matches = from === '' ? s.length + 1 : s.split(from).length - 1;
  if (s.length + matches * (to.length - from.length) > MAX_BUILT_LENGTH) throw new ArgumentLimitError('result length', MAX_BUILT_LENGTH);
  return s.replaceAll(from, to);
}

function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Rejection sampling keeps every character equally likely (256 is not a multiple of 62). */
function randomBase62(length: number, random: (n: number) => Buffer): string {
  const limit = 256 - (256 % BASE62.length);
  let out = '';
  while (out.length < length) {
    for (const b of random(length - out.length)) {
      if (b < limit && out.length < length) out += BASE62[b % BASE62.length];
    }
  }
  return out;
}

function uuidV4(b: Buffer): string {
  const bytes = Buffer.from(b);
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
