import { describe, expect, it } from 'vitest';
import { backoffDelay, classify, createOnce, principalNotReplicated, withRetry } from '../../src/providers/azure/retry.ts';
import { AzureProviderError, parseRetryAfter, redact, toProviderError } from '../../src/providers/azure/errors.ts';

/** Errors shaped like the SDKs' (RestError / GraphError): statusCode, code, headers. */
function httpError(statusCode: number, code?: string, headers: Record<string, string> = {}, message = code ?? `status ${statusCode}`): Error {
  return Object.assign(new Error(message), { statusCode, code, headers: new Headers(headers) });
}

/** A fake clock whose sleep advances time, so backoff is tested without waiting. */
function fakeTime() {
  let t = 0;
  const sleeps: number[] = [];
  return { now: () => t, sleep: async (ms: number) => { sleeps.push(ms); t += ms; }, sleeps };
}

describe('classify', () => {
  it.each([
    [httpError(429, 'TooManyRequests', { 'Retry-After': '3' }), true, 'throttled', 3000],
    [httpError(500), true, 'server', undefined],
    [httpError(503, 'ServiceUnavailable', { 'retry-after-ms': '1500' }), true, 'server', 1500],
    [httpError(408), true, 'server', undefined],
    [Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }), true, 'network', undefined],
    [httpError(400, 'Request_BadRequest'), false, undefined, undefined],
    [httpError(404, 'Request_ResourceNotFound'), false, undefined, undefined],
    [httpError(403, 'AuthorizationFailed'), false, undefined, undefined],
    [httpError(409, 'RoleAssignmentExists'), false, undefined, undefined],
  ])('%s → retryable=%s (%s)', (err, retryable, reason, retryAfterMs) => {
    const c = classify(err);
    expect(c.retryable).toBe(retryable);
    expect(c.reason).toBe(reason);
    expect(c.retryAfterMs).toBe(retryAfterMs);
  });

  it('PrincipalNotFound is retryable only where the operation says it means replication', () => {
    const err = httpError(400, 'PrincipalNotFound');
    expect(classify(err).retryable).toBe(false);
    expect(classify(err, principalNotReplicated)).toMatchObject({ retryable: true, reason: 'replication', outcomeUnknown: false });
  });

  it('5xx and network failures leave the outcome unknown; 429 does not', () => {
    expect(classify(httpError(502)).outcomeUnknown).toBe(true);
    expect(classify(httpError(429)).outcomeUnknown).toBe(false);
  });

  it('parses Retry-After as seconds or an HTTP date', () => {
    expect(parseRetryAfter(new Headers({ 'retry-after': '2' }))).toBe(2000);
    expect(parseRetryAfter({ 'retry-after': new Date(10_000).toUTCString() }, 4_000)).toBe(6000);
    expect(parseRetryAfter(new Headers())).toBeUndefined();
  });
});

describe('backoffDelay', () => {
  it('grows exponentially with jitter inside [ceiling/2, ceiling] and is capped', () => {
    const opts = { baseDelayMs: 100, maxDelayMs: 1000 };
    expect(backoffDelay(1, {}, { ...opts, random: () => 0 })).toBe(50);
    expect(backoffDelay(1, {}, { ...opts, random: () => 1 })).toBe(100);
    expect(backoffDelay(3, {}, { ...opts, random: () => 1 })).toBe(400);
    expect(backoffDelay(10, {}, { ...opts, random: () => 1 })).toBe(1000);
    expect(backoffDelay(10, {}, { ...opts, random: () => 0 })).toBe(500);
  });

  it('never waits less than Retry-After', () => {
    for (const r of [0, 0.5, 1]) expect(backoffDelay(1, { retryAfterMs: 3000 }, { baseDelayMs: 100, random: () => r })).toBeGreaterThanOrEqual(3000);
  });
});

describe('withRetry', () => {
  it('retries retryable failures and returns the eventual result', async () => {
    const time = fakeTime();
    let calls = 0;
    const result = await withRetry(async () => {
      calls++;
      if (calls === 1) throw httpError(429, 'TooManyRequests', { 'Retry-After': '2' });
      if (calls === 2) throw httpError(503);
      return 'ok';
    }, { ...time, random: () => 0.5, baseDelayMs: 100 });
    expect(result).toBe('ok');
    expect(calls).toBe(3);
    expect(time.sleeps[0]).toBeGreaterThanOrEqual(2000);
    expect(time.sleeps).toHaveLength(2);
  });

  it('fails at once on a non-retryable error', async () => {
    const time = fakeTime();
    await expect(withRetry(async () => { throw httpError(400, 'Request_BadRequest'); }, time)).rejects.toThrow('Request_BadRequest');
    expect(time.sleeps).toHaveLength(0);
  });

  it('stops before a wait would pass the deadline and rethrows the last error', async () => {
    const time = fakeTime();
    let calls = 0;
    const err = await withRetry(async () => { calls++; throw httpError(429, 'TooManyRequests', { 'Retry-After': '4' }); }, { ...time, deadlineMs: 10_000 }).catch((e: unknown) => e);
    expect((err as { statusCode: number }).statusCode).toBe(429);
    expect(calls).toBe(3);
    expect(time.now()).toBeLessThanOrEqual(10_000);
    expect(toProviderError(err, 'list groups').status).toBe(429);
  });

  it('honours maxAttempts and an aborted signal', async () => {
    const time = fakeTime();
    let calls = 0;
    await expect(withRetry(async () => { calls++; throw httpError(500); }, { ...time, maxAttempts: 2 })).rejects.toThrow();
    expect(calls).toBe(2);
    const ac = new AbortController();
    ac.abort(new Error('request ended'));
    await expect(withRetry(async () => 'never', { signal: ac.signal })).rejects.toThrow('request ended');
  });
});

describe('createOnce', () => {
  it('after a lost answer, finds what the first attempt created instead of creating again', async () => {
    const time = fakeTime();
    const created: string[] = [];
    const sp = await createOnce(
      async () => {
        created.push('sp');
        if (created.length === 1) throw httpError(500);
        return 'second';
      },
      async () => (created.length > 0 ? 'first' : undefined),
      () => false,
      time,
    );
    expect(sp).toBe('first');
    expect(created).toHaveLength(1);
  });

  it('a conflict resolves to the existing object; a throttled create is simply retried', async () => {
    const time = fakeTime();
    expect(await createOnce(async () => { throw httpError(409, 'Conflict'); }, async () => 'existing', (e) => (e as { code?: string }).code === 'Conflict', time)).toBe('existing');
    let lookups = 0;
    let attempts = 0;
    const v = await createOnce(async () => { if (++attempts === 1) throw httpError(429); return 'made'; }, async () => { lookups++; return undefined; }, () => false, time);
    expect(v).toBe('made');
    expect(lookups).toBe(0);
  });
});

describe('provider errors', () => {
  it('maps status and codes to 502 / 429 / 400 and scrubs secrets and tokens', () => {
    const jwt = 'eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln';
    const e = toProviderError(httpError(500, 'InternalServerError', {}, `boom client_secret=s3cr3t-value Authorization: Bearer ${jwt}`), 'create application', ['s3cr3t-value']);
    expect(e).toBeInstanceOf(AzureProviderError);
    expect(e.status).toBe(502);
    expect(e.message).not.toContain('s3cr3t-value');
    expect(e.message).not.toContain(jwt);
    expect(toProviderError(httpError(404, 'Request_ResourceNotFound'), 'get group').status).toBe(400);
    expect(toProviderError(httpError(400, 'RoleDefinitionDoesNotExist'), 'get role').status).toBe(400);
    expect(toProviderError(httpError(403, 'Authorization_RequestDenied'), 'add member').status).toBe(502);
    expect(toProviderError(httpError(429), 'x').status).toBe(429);
  });

  it('redacts the shapes SDK debug logs use', () => {
    const line = redact('POST body client_id=abc&client_secret=topsecret&scope=x client_assertion=eyJa.eyJb.c "secretText":"abc~123" authorization: Bearer abc.def', []);
    expect(line).not.toMatch(/topsecret|abc~123|abc\.def|eyJa/);
    expect(line).toContain('client_id=abc');
  });
});
