/**
 * Retries for Azure calls, classified by HTTP status and error code instead of message substrings:
 * throttling (429, honouring Retry-After), server errors (5xx), network failures and "not replicated
 * yet" answers are retried with jittered exponential backoff until a deadline; everything else fails
 * at once. The SDKs' own retry policies are switched off so this is the only retry layer and the
 * deadline really bounds the call.
 */
import { describeUpstream, toProviderError, type AzureProviderError, type UpstreamInfo } from './errors.ts';

export type RetryReason = 'throttled' | 'server' | 'network' | 'replication';

export interface Classification {
  retryable: boolean;
  reason?: RetryReason;
  retryAfterMs?: number;
  /** The request may have been carried out although it failed (5xx, dropped connection). */
  outcomeUnknown: boolean;
}

/**
 * Per-operation hint: which answers mean "a principal created moments ago is not visible to this
 * service yet". It depends on the call (a Request_ResourceNotFound on a group member add refers to
 * the new principal; on a GET it is a plain 404).
 */
export type ReplicationCheck = (info: UpstreamInfo) => boolean;

/** ARM: a role assignment for a principal the ARM replica does not know yet. */
export const principalNotReplicated: ReplicationCheck = (i) => i.code === 'PrincipalNotFound';

export function classify(err: unknown, notReplicated?: ReplicationCheck): Classification {
  const info = describeUpstream(err);
  if (info.status === 429) return { retryable: true, reason: 'throttled', retryAfterMs: info.retryAfterMs, outcomeUnknown: false };
  if (info.status === 408 || (info.status !== undefined && info.status >= 500)) {
    return { retryable: true, reason: 'server', retryAfterMs: info.retryAfterMs, outcomeUnknown: true };
  }
  if (info.network) return { retryable: true, reason: 'network', outcomeUnknown: true };
  if (notReplicated?.(info)) return { retryable: true, reason: 'replication', outcomeUnknown: false };
  return { retryable: false, outcomeUnknown: false };
}

export interface RetryOptions {
  /** Absolute budget for all attempts and waits, in ms from the first attempt. */
  deadlineMs?: number;
  signal?: AbortSignal;
  baseDelayMs?: number;
  maxDelayMs?: number;
  maxAttempts?: number;
  notReplicated?: ReplicationCheck;
  /** Injectable for tests. */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  now?: () => number;
  random?: () => number;
  onRetry?: (event: { attempt: number; delayMs: number; reason: RetryReason; error: unknown }) => void;
}

export const RETRY_DEFAULTS = { deadlineMs: 60_000, baseDelayMs: 250, maxDelayMs: 8_000, maxAttempts: 12 } as const;

export function defaultSleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Delay before retry number `attempt` (1-based): "full jitter" exponential backoff, so concurrent
 * callers do not retry in lockstep; a server's Retry-After is a floor, never shortened.
 */
export function backoffDelay(attempt: number, c: Pick<Classification, 'retryAfterMs'>, opts: Pick<RetryOptions, 'baseDelayMs' | 'maxDelayMs' | 'random'> = {}): number {
  const base = opts.baseDelayMs ?? RETRY_DEFAULTS.baseDelayMs;
  const max = opts.maxDelayMs ?? RETRY_DEFAULTS.maxDelayMs;
  const random = opts.random ?? Math.random;
  const ceiling = Math.min(max, base * 2 ** (attempt - 1));
  const jittered = Math.round(ceiling / 2 + random() * (ceiling / 2));
  if (c.retryAfterMs !== undefined) return Math.max(c.retryAfterMs, Math.round(c.retryAfterMs + random() * base * 0.2));
  return jittered;
}

/** Runs `op` until it succeeds, fails non-retryably, runs out of attempts or would pass the deadline; rethrows the last error. */
export async function withRetry<T>(op: (attempt: number) => Promise<T>, opts: RetryOptions = {}): Promise<T> {
  const now = opts.now ?? Date.now;
  const sleep = opts.sleep ?? defaultSleep;
  const deadline = now() + (opts.deadlineMs ?? RETRY_DEFAULTS.deadlineMs);
  const maxAttempts = opts.maxAttempts ?? RETRY_DEFAULTS.maxAttempts;
  for (let attempt = 1; ; attempt++) {
    opts.signal?.throwIfAborted();
    try {
      return await op(attempt);
    } catch (err) {
      const c = classify(err, opts.notReplicated);
      if (!c.retryable || attempt >= maxAttempts) throw err;
      const delayMs = backoffDelay(attempt, c, opts);
      if (now() + delayMs > deadline) throw err;
      opts.onRetry?.({ attempt, delayMs, reason: c.reason!, error: err });
      await sleep(delayMs, opts.signal);
    }
  }
}

/**
 * Creates something exactly once across retries. After an attempt whose outcome is unknown (5xx,
 * dropped connection) or a conflict saying it already exists, `findExisting` is asked first, so a
 * retried "create service principal" returns the one the lost response created instead of a twin.
 */
export async function createOnce<T>(
  create: () => Promise<T>,
  findExisting: () => Promise<T | undefined>,
  isConflict: (err: unknown) => boolean,
  opts: RetryOptions = {},
): Promise<T> {
  let checkFirst = false;
  return withRetry(async () => {
    if (checkFirst) {
      const found = await findExisting();
      if (found !== undefined) return found;
    }
    try {
      return await create();
    } catch (err) {
      if (isConflict(err)) {
        const found = await findExisting();
        if (found !== undefined) return found;
      }
      checkFirst ||= classify(err, opts.notReplicated).outcomeUnknown;
      throw err;
    }
  }, opts);
}

/** Per call: the caller's deadline and cancellation (e.g. the HTTP request's). */
export interface CallOptions {
  signal?: AbortSignal;
  deadlineMs?: number;
}

export function callRetryOptions(opts: CallOptions = {}): Partial<RetryOptions> {
  const out: Partial<RetryOptions> = {};
  if (opts.signal) out.signal = opts.signal;
  if (opts.deadlineMs !== undefined) out.deadlineMs = opts.deadlineMs;
  return out;
}

/** What a client passes to `providerCall`: its retry settings and the secrets no error text may carry. */
export interface CallContext {
  retry: Partial<RetryOptions>;
  secrets: Iterable<string | undefined>;
  /** Unwraps an SDK's wrapper error before classification (the Graph client wraps auth failures). */
  unwrap?: (err: unknown) => unknown;
}

/** Runs a provider call in the retry loop; the final failure becomes an {@link AzureProviderError}. */
export async function providerCall<T>(operation: string, fn: () => Promise<T>, ctx: CallContext, opts: CallOptions = {}, notReplicated?: ReplicationCheck): Promise<T> {
  try {
    return await withRetry(fn, { ...ctx.retry, ...callRetryOptions(opts), notReplicated });
  } catch (err) {
    throw toProviderError(ctx.unwrap ? ctx.unwrap(err) : err, operation, ctx.secrets);
  }
}
