import type { Logger } from 'pino';

/** One line per answered request: the path without its query (a query may carry a token), status and time. */
export type AccessLog = (method: string, target: string, status: number, ms: number) => void;

/**
 * The level is fixed at start, so at a quieter level there is no access log at all, and callers skip the work
 * of logging (for Fastify, the hook: a hook costs every request a trip through its hook runner).
 */
export function accessLog(logger: Logger): AccessLog | undefined {
  if (!logger.isLevelEnabled('info')) return undefined;
  return (method, target, status, ms) => logger.info({ method, path: target.split('?', 1)[0], status, ms: Math.round(ms) }, 'request');
}
