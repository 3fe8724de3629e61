import type { Logger } from 'pino';
import type { ServedRequest } from '../core/request.ts';

/**
 * One line per answered request: its request id, the path without its query (a query may carry a token), the mount
 * and operation it was routed to, status and time. Nothing of its body, headers or answer.
 */
export type AccessLog = (method: string, target: string, status: number, ms: number, served: ServedRequest | undefined) => void;

/**
 * The level is fixed at start, so at a quieter level there is no access log at all, and callers skip the work
 * of logging (for Fastify, the hook: a hook costs every request a trip through its hook runner).
 */
export function accessLog(logger: Logger): AccessLog | undefined {
  if (!logger.isLevelEnabled('info')) return undefined;
  return (method, target, status, ms, served) => logger.info({
    request_id: served?.id, method, path: target.split('?', 1)[0], mount: served?.mount, operation: served?.operation, status, ms: Math.round(ms),
  }, 'request');
}
