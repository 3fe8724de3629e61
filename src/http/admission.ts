import { Transform, type Readable } from 'node:stream';
import type { Core } from '../core/core.ts';
import { PayloadTooLargeError, StrongroomError } from '../core/errors.ts';
import { storageRefusal } from '../core/storage/types.ts';

/**
 * A store that can no longer write answers nothing: reads would serve a state that revocations can no longer
 * change (a revoked token would keep working). Its failure names the cause, never data. A store that has lost its
 * database for now (PostgreSQL) is refused the same way until it is back: another node may be revoking meanwhile.
 */
export function storageUnavailable(core: Core): StrongroomError | undefined {
  const refusal = storageRefusal(core.options.storage);
  return refusal && (refusal instanceof StrongroomError ? refusal : new StrongroomError(503, `storage is unavailable: ${refusal.message}`));
}

/**
 * The body as it streams in, failing with a 413 at the first byte past `limit`: a chunked body declares no length,
 * so it is counted before anything holds it whole. Fastify answers a failed body and closes the connection.
 */
export function cappedBody(body: Readable, limit: number): Readable {
  let received = 0;
  const capped = new Transform({
    transform(chunk: Buffer, _encoding, next) {
      received += chunk.length;
      next(received > limit ? new PayloadTooLargeError(limit) : null, chunk);
    },
  });
  body.pipe(capped);
  return capped;
}
