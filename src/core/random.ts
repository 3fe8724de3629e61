import { randomFillSync } from 'node:crypto';

/**
 * CSPRNG bytes drawn from a pre-filled pool. Each `randomBytes` call costs a trip into OpenSSL (~3 µs);
 * a request that mints a token and writes four encrypted rows needs about ten such draws. The pool holds
 * CSPRNG output only, hands each byte out once, and copies it out so callers never share memory with it
 * (Node's own randomUUID keeps a cache the same way).
 */
const POOL_SIZE = 8192;
const pool = Buffer.allocUnsafe(POOL_SIZE);
let offset = POOL_SIZE;

export function secureRandomBytes(n: number): Buffer {
  if (n > POOL_SIZE / 4) return randomFillSync(Buffer.allocUnsafe(n));
  if (offset + n > POOL_SIZE) {
    randomFillSync(pool);
    offset = 0;
  }
  const out = Buffer.from(pool.subarray(offset, offset + n));
  pool.fill(0, offset, offset + n);
  offset += n;
  return out;
}
