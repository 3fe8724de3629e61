import { randomUUID } from 'node:crypto';
import { secureRandomBytes } from './random.ts';

const BASE62 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** Unbiased base62 string from the CSPRNG (rejection sampling over bytes). */
export function randomBase62(length: number): string {
  let out = '';
  while (out.length < length) {
    for (const b of secureRandomBytes(length * 2)) {
      if (b < 248) out += BASE62[b % 62];
      if (out.length === length) break;
    }
  }
  return out;
}

export function randomHex(bytes: number): string {
  return secureRandomBytes(bytes).toString('hex');
}

export const newRequestId = (): string => randomUUID();
export const newUuid = (): string => randomUUID();
