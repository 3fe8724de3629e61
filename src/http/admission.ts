import type { Core } from '../core/core.ts';
import { StrongroomError } from '../core/errors.ts';

/**
 * A store that can no longer write answers nothing: reads would serve a state that revocations can no longer
 * change (a revoked token would keep working). Its failure names the cause, never data.
 */
export function storageUnavailable(core: Core): StrongroomError | undefined {
  const failure = core.options.storage.failure;
  return failure && new StrongroomError(503, `storage is unavailable: ${failure.message}`);
}
