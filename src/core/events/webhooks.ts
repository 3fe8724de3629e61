/**
 * Webhooks (docs/events.md): each configured webhook receives the events its types and filter select, read from the
 * event log in order, at least once. The leader delivers; each webhook's cursor (the last sequence handled) moves only
 * after a 2xx answer, or when the event goes to the dead-letter list after its last attempt, in one transaction carrying
 * the leader's fence, so a deposed leader cannot move it.
 */
import { createHmac } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import { BadRequestError } from '../errors.ts';
import type { StorageCondition } from '../storage/types.ts';
import { jsonBytes, type StorageView } from '../storage/view.ts';
import type { DeliveredEvent } from './envelope.ts';
import type { EventFeed } from './feed.ts';
import { parseFilter } from './filter.ts';
import { globMatches } from './glob.ts';
import type { EventCounters } from './outbox.ts';

export const webhookSchema = z.object({
  url: z.string(),
  event_types: z.array(z.string()),
  filter: z.string(),
  /** Barrier-encrypted like every entry; never returned. */
  secret: z.string(),
  /** Sent with every delivery; values never returned (they are often credentials). */
  headers: z.record(z.string(), z.string()),
});
export type Webhook = z.infer<typeof webhookSchema>;

export interface DeadLetter {
  event: DeliveredEvent;
  attempts: number;
  last_error: string;
  failed_at: string;
}

export interface WebhookOptions {
  /** http:// to anything but loopback (docs/events.md). */
  allowHttp: boolean;
  retryBaseMs: number;
  attempts: number;
  pollMs: number;
}

export const WEBHOOK_DEFAULTS: WebhookOptions = { allowHttp: false, retryBaseMs: 1000, attempts: 5, pollMs: 500 };
const ATTEMPT_TIMEOUT_MS = 10_000;
const BATCH = 50;
/** Headers Strongroom sets itself; a webhook may not replace them. */
const RESERVED_HEADERS = new Set(['content-type', 'content-length', 'host', 'x-strongroom-signature', 'x-strongroom-event-id']);
const LOOPBACK = /^(127(\.\d{1,3}){3}|\[::1\]|localhost)$/i;

const configKey = (name: string) => `events/webhook/${name}`;
const cursorKey = (name: string) => `events/webhook-cursor/${name}`;
const failurePrefix = (name: string) => `events/webhook-failure/${name}/`;
const failureKey = (name: string, seq: number) => `${failurePrefix(name)}${String(seq).padStart(16, '0')}`;

/** `X-Strongroom-Signature`: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>`. */
export function signature(secret: string, body: string, unixSeconds: number): string {
  return `t=${unixSeconds},v1=${createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex')}`;
}

/** Checks a webhook before it is stored: a 400 naming the field. */
export function validateWebhook(hook: Webhook, allowHttp: boolean): void {
  let url: URL;
  try {
    url = new URL(hook.url);
  } catch {
    throw new BadRequestError('url: not a URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new BadRequestError('url: must be https:// (or http:// to loopback)');
  if (url.protocol === 'http:' && !allowHttp && !LOOPBACK.test(url.hostname)) throw new BadRequestError('url: http:// is allowed only to loopback unless STRONGROOM_EVENTS_WEBHOOK_ALLOW_HTTP is set');
  if (url.username || url.password) throw new BadRequestError('url: must not hold credentials (use headers)');
  if (hook.event_types.length === 0) throw new BadRequestError('event_types: at least one event type (a glob)');
  if (hook.secret.length < 16) throw new BadRequestError('secret: at least 16 characters');
  parseFilter(hook.filter);
  for (const name of Object.keys(hook.headers)) {
    if (RESERVED_HEADERS.has(name.toLowerCase()) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) throw new BadRequestError(`headers: "${name.slice(0, 64)}" cannot be set`);
  }
}

export class Webhooks {
  readonly #view: StorageView;
  readonly #feed: EventFeed;
  readonly #fence: () => StorageCondition[];
  readonly #leading: () => boolean;
  readonly #logger: Logger;
  readonly #counters: EventCounters;
  readonly options: WebhookOptions;
  #timer: NodeJS.Timeout | undefined;
  #running = false;

  constructor(view: StorageView, feed: EventFeed, cluster: { leading(): boolean; fence(): StorageCondition[] }, logger: Logger, counters: EventCounters, options: WebhookOptions) {
    this.#view = view;
    this.#feed = feed;
    this.#fence = () => cluster.fence();
    this.#leading = () => cluster.leading();
    this.#logger = logger;
    this.#counters = counters;
    this.options = options;
  }

  start(): void {
    this.#timer ??= setInterval(() => void this.#tick(), this.options.pollMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  get(name: string): Promise<Webhook | undefined> {
    return this.#view.getJson(configKey(name), (raw) => webhookSchema.parse(raw));
  }

  list(): Promise<string[]> {
    return this.#view.list('events/webhook/');
  }

  /** A new webhook starts at the head of the log: it receives what is committed from now on. */
  async put(name: string, hook: Webhook): Promise<void> {
    validateWebhook(hook, this.options.allowHttp);
    const created = (await this.get(name)) === undefined;
    await this.#view.transaction([
      { type: 'put', key: configKey(name), value: jsonBytes(hook) },
      ...(created ? [{ type: 'put' as const, key: cursorKey(name), value: jsonBytes({ after: this.#feed.head }) }] : []),
    ]);
  }

  async delete(name: string): Promise<void> {
    const failures = await this.#view.list(failurePrefix(name));
    await this.#view.transaction([configKey(name), cursorKey(name), ...failures.map((f) => failurePrefix(name) + f)].map((key) => ({ type: 'delete' as const, key })));
  }

  async failures(name: string): Promise<DeadLetter[]> {
    const keys = await this.#view.list(failurePrefix(name));
    const out: DeadLetter[] = [];
    for (const key of keys) {
      const letter = await this.#view.getJson<DeadLetter>(failurePrefix(name) + key);
      if (letter) out.push(letter);
    }
    return out;
  }

  /** Delivers each dead letter once more; those answered 2xx leave the list. */
  async replay(name: string): Promise<{ replayed: number; failed: number }> {
    const hook = await this.get(name);
    if (!hook) throw new BadRequestError(`no webhook named "${name}"`);
    let replayed = 0;
    for (const letter of await this.failures(name)) {
      if ((await this.#attempt(hook, letter.event)) !== undefined) continue;
      await this.#view.delete(failureKey(name, letter.event.sequence));
      replayed++;
    }
    return { replayed, failed: (await this.failures(name)).length };
  }

  async #tick(): Promise<void> {
    if (this.#running || !this.#leading()) return;
    this.#running = true;
    try {
      for (const name of await this.list()) await this.#drain(name);
    } catch (err) {
      this.#logger.warn({ err: { message: (err as Error).message } }, 'webhook delivery stopped; the next round resumes it');
    } finally {
      this.#running = false;
    }
  }

  /** Delivers what the webhook has not handled yet, in order, while this node leads. */
  async #drain(name: string): Promise<void> {
    const hook = await this.get(name);
    if (!hook) return;
    const filter = parseFilter(hook.filter);
    let cursorRaw = await this.#view.get(cursorKey(name));
    let after = cursorRaw ? (JSON.parse(cursorRaw.toString('utf8')) as { after: number }).after : 0;
    for (;;) {
      const events = await this.#feed.read(after, BATCH);
      for (const event of events) {
        if (!this.#leading()) return;
        const wanted = hook.event_types.some((p) => globMatches(p, event.data.event_type)) && filter(event);
        const error = wanted ? await this.#deliver(hook, event) : undefined;
        const letter: DeadLetter | undefined = error === undefined ? undefined : { event, attempts: this.options.attempts, last_error: error, failed_at: new Date().toISOString() };
        const next = jsonBytes({ after: event.sequence });
        const moved = await this.#view.transaction([
          { type: 'put', key: cursorKey(name), value: next },
          ...(letter ? [{ type: 'put' as const, key: failureKey(name, event.sequence), value: jsonBytes(letter) }] : []),
        ], [{ key: cursorKey(name), expected: cursorRaw }], [{ ops: [], conditions: this.#fence(), committed: () => {} }]);
        // Fenced out (another node leads now) or the webhook was replaced: the leader's next round carries on.
        if (!moved) return;
        if (letter) this.#counters.webhookFailures++;
        cursorRaw = next;
        after = event.sequence;
      }
      if (events.length < BATCH) return;
    }
  }

  /** Up to `attempts` tries with jittered exponential backoff; undefined once one answered 2xx, else the last error. */
  async #deliver(hook: Webhook, event: DeliveredEvent): Promise<string | undefined> {
    let error: string | undefined;
    for (let attempt = 0; attempt < this.options.attempts; attempt++) {
      if (attempt > 0) await new Promise((r) => setTimeout(r, this.options.retryBaseMs * 2 ** (attempt - 1) * (0.5 + Math.random())));
      if (!this.#leading()) return 'this node stopped leading';
      error = await this.#attempt(hook, event);
      if (error === undefined) return undefined;
      this.#logger.info({ event_id: event.id, attempt: attempt + 1, error }, 'webhook delivery failed; retrying');
    }
    return error;
  }

  /** One POST; the response body is never read or stored, and a redirect is a failure (never followed). */
  async #attempt(hook: Webhook, event: DeliveredEvent): Promise<string | undefined> {
    const body = JSON.stringify(event);
    try {
      const res = await fetch(hook.url, {
        method: 'POST', body, redirect: 'manual', signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        headers: { ...hook.headers, 'content-type': 'application/cloudevents+json', 'x-strongroom-event-id': event.id, 'x-strongroom-signature': signature(hook.secret, body, Math.floor(Date.now() / 1000)) },
      });
      await res.body?.cancel();
      return res.status >= 200 && res.status < 300 ? undefined : `HTTP ${res.status}`;
    } catch (err) {
      return (err as Error).name === 'TimeoutError' ? 'no answer within 10s' : 'connection failed';
    }
  }
}
