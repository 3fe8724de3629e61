import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { Clock } from '../clock.ts';
import type { CoreResponse } from '../request.ts';
import { BadRequestError, ConflictError, StrongroomError } from '../errors.ts';
import { newUuid } from '../ids.ts';
import type { StorageView } from '../storage/view.ts';
import { AuditRecord, EntryFormat, errorOf, Salt } from './entry.ts';
import { LineQueue } from './devices/sink.ts';
import { deviceConfig, type AuditSettings, type DeviceConfig } from './options.ts';
import { DeviceProbes, type AuditPeers } from './probes.ts';
import { normalizeMountPath } from '../mounts.ts';

/** One row of the audit table: cluster-wide configuration; every node writes its own log from it. */
const deviceEntrySchema = z.object({
  path: z.string(),
  type: z.string(),
  description: z.string(),
  options: z.record(z.string(), z.string()),
  local: z.boolean(),
  uuid: z.string(),
});
export type AuditDeviceEntry = z.infer<typeof deviceEntrySchema>;

const TABLE_KEY = 'table';
const saltKey = (uuid: string) => `salt/${uuid}`;
/** A failing device says so at most this often (with the count meanwhile): under load it fails on every request. */
const WARN_INTERVAL_MS = 10_000;

export type EntryKind = 'request' | 'response';

/** The answer when no device could write: Vault's fail-closed rule. */
export class AuditFailureError extends StrongroomError {
  constructor(kind: EntryKind) {
    super(500, kind === 'request'
      ? 'audit log failure: no audit device could record the request, so it was not run'
      : 'audit log failure: no audit device could record the response; the request took effect but its answer is withheld');
  }
}

class Device {
  readonly entry: AuditDeviceEntry;
  readonly failures = { request: 0, response: 0 };
  /** Both undefined when the device could not be built from its stored options: every write then fails with `broken`. */
  readonly #format: EntryFormat | undefined;
  readonly #queue: LineQueue | undefined;
  readonly #broken: Error | undefined;
  #failing = false;
  #unreported = 0;
  #lastWarning = -Infinity;

  constructor(entry: AuditDeviceEntry, salt: string, config: DeviceConfig | Error) {
    this.entry = entry;
    if (config instanceof Error) {
      this.#broken = config;
    } else {
      this.#format = new EntryFormat(new Salt(salt), config.entry, config.prefix);
      this.#queue = new LineQueue(config.sink);
    }
  }

  hash(input: string): string {
    if (!this.#format) throw new BadRequestError(`the audit device at "${this.entry.path}" cannot be used: ${reason(this.#broken)}`);
    return this.#format.hash(input);
  }

  write(kind: EntryKind, rec: AuditRecord, time: number, error: string | undefined): Promise<void> {
    if (!this.#format) return Promise.reject(this.#broken);
    return this.#queue!.write(this.#format.line(kind, rec, time, error));
  }

  reopen(): Promise<void> {
    return this.#queue?.reopen() ?? Promise.resolve();
  }

  close(): Promise<void> {
    return this.#queue?.close() ?? Promise.resolve();
  }

  /**
   * Counted for the metrics; logged without the entry (which may hold what it was hashing) and without flooding.
   * Returns the failed writes the warning reported, undefined when it held its warning back.
   */
  failed(kind: EntryKind, err: unknown, logger: Logger, now: number): number | undefined {
    this.failures[kind]++;
    this.#failing = true;
    this.#unreported++;
    if (now - this.#lastWarning < WARN_INTERVAL_MS) return undefined;
    const count = this.#unreported;
    logger.warn({ audit_device: this.entry.path, type: this.entry.type, entry: kind, reason: reason(err), failed_writes: count }, 'audit device could not write an entry');
    this.#lastWarning = now;
    this.#unreported = 0;
    return count;
  }

  succeeded(logger: Logger): void {
    if (!this.#failing) return;
    this.#failing = false;
    this.#lastWarning = -Infinity;
    logger.info({ audit_device: this.entry.path, type: this.entry.type, failed_writes: this.#unreported }, 'audit device writes entries again');
    this.#unreported = 0;
  }
}

/** The device a request disables (`DELETE sys/audit/:path`), if it is one. */
function disabledBy(rec: AuditRecord): string | undefined {
  if (rec.operation !== 'delete' || !rec.path.startsWith('sys/audit/')) return undefined;
  try {
    return normalizeMountPath(rec.path.slice('sys/audit/'.length));
  } catch {
    return undefined;
  }
}

/** File and socket errors name the target and the system's code, never what was being written. */
function reason(err: unknown): string {
  return String((err as Error)?.message ?? err);
}

/**
 * Vault's audit broker: the devices enabled in the cluster's audit table, opened by this node. Every request gets a
 * request entry before its handler runs and a response entry before its answer leaves; with at least one device
 * enabled, an entry no device could write refuses the request (fail closed). One device that wrote is enough.
 */
export class AuditBroker {
  /** Whether any device is enabled: the only thing the request pipeline looks at when none is. */
  enabled = false;
  readonly #view: StorageView;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #settings: AuditSettings;
  readonly #probes: DeviceProbes;
  readonly #onFailure: ((metadata: Record<string, string>) => Promise<void>) | undefined;
  #devices: Device[] = [];
  /** Table changes (load, enable, disable) one at a time, so devices are opened and closed in the table's order. */
  #changes: Promise<unknown> = Promise.resolve();

  /** `onFailure`: records a device's failure as an event (docs/events.md). */
  constructor(view: StorageView, logger: Logger, clock: Clock, settings: AuditSettings, peers: AuditPeers, onFailure?: (metadata: Record<string, string>) => Promise<void>) {
    this.#onFailure = onFailure;
    this.#view = view;
    this.#logger = logger;
    this.#clock = clock;
    this.#settings = settings;
    this.#probes = new DeviceProbes(view, peers, settings, logger);
  }

  /**
   * Reads the audit table and opens or closes devices to match it: at start, and again whenever another node may
   * have changed it. A device that cannot be opened stays enabled and fails its writes until it can (fail closed).
   * Probes of devices other nodes are enabling are answered first, outside the queue of table changes, so a node
   * busy enabling one of its own still answers.
   */
  async load(): Promise<void> {
    await this.#probes.answer().catch((err: unknown) => this.#logger.warn({ reason: reason(err) }, 'answering the audit device probes of other nodes failed'));
    await this.#serial(async () => this.#apply((await this.#read()).table));
  }

  list(): AuditDeviceEntry[] {
    return this.#devices.map((d) => d.entry);
  }

  /**
   * Enables a device at `path` (normalised, with its trailing slash). It must open now, here and on every other live
   * node (probes.ts), or nothing is stored.
   */
  enable(path: string, type: string, description: string, options: Record<string, string>, local: boolean): Promise<void> {
    return this.#serial(async () => {
      const { table, stored } = await this.#read();
      const taken = table.find((e) => e.path.startsWith(path) || path.startsWith(e.path));
      if (taken) throw new BadRequestError(`path already in use at "${taken.path}"`);
      const config = deviceConfig(type, options, this.#settings);
      try {
        await config.sink.open();
      } catch (err) {
        throw new BadRequestError(`the ${type} audit device cannot be opened: ${reason(err)}`);
      }
      const entry: AuditDeviceEntry = { path, type, description, options, local, uuid: newUuid() };
      const salt = randomUUID();
      const next = [...table, entry];
      let applied = false;
      try {
        await this.#probes.confirm(entry.uuid, type, options);
        applied = await this.#view.transaction([
          { type: 'put', key: saltKey(entry.uuid), value: Buffer.from(salt) },
          { type: 'put', key: TABLE_KEY, value: Buffer.from(JSON.stringify(next)) },
        ], [{ key: TABLE_KEY, expected: stored }]);
      } finally {
        if (!applied) await config.sink.close();
      }
      if (!applied) throw new ConflictError('the audit table changed while the device was being enabled; enable it again');
      await this.#apply(next, new Device(entry, salt, config));
      this.#logger.info({ audit_device: path, type }, 'audit device enabled');
    });
  }

  /** Disables the device at `path`; its salt goes with it, so its old hashes can no longer be reproduced (as in Vault). */
  disable(path: string): Promise<void> {
    return this.#serial(async () => {
      const { table, stored } = await this.#read();
      const gone = table.find((e) => e.path === path);
      if (!gone) return;
      const next = table.filter((e) => e !== gone);
      const applied = await this.#view.transaction([
        { type: 'delete', key: saltKey(gone.uuid) },
        { type: 'put', key: TABLE_KEY, value: Buffer.from(JSON.stringify(next)) },
      ], [{ key: TABLE_KEY, expected: stored }]);
      if (!applied) throw new ConflictError('the audit table changed while the device was being disabled; disable it again');
      await this.#apply(next);
      this.#logger.info({ audit_device: path, type: gone.type }, 'audit device disabled');
    });
  }

  /** `sys/audit-hash`: what the device at `path` writes for `input`. */
  hash(path: string, input: string): string {
    const device = this.#devices.find((d) => d.entry.path === path);
    if (!device) throw new BadRequestError(`no audit device is enabled at "${path}"`);
    return device.hash(input);
  }

  /** The request entry, before the handler runs; throws AuditFailureError when no device could write it. */
  async logRequest(rec: AuditRecord): Promise<void> {
    if (!(await this.#emit('request', rec, undefined))) {
      rec.state = 'refused';
      throw new AuditFailureError('request');
    }
    rec.state = 'logged';
  }

  /**
   * The response entry (and, for a request refused before its handler, the request entry first, both with the
   * error): returns the answer to send, which is a 500 when no device could write.
   */
  async logResponse(rec: AuditRecord, res: CoreResponse): Promise<CoreResponse> {
    if (rec.state === 'refused') return res;
    const error = errorOf(res);
    const recorded = (rec.state === 'logged' || (await this.#emit('request', rec, error))) && (await this.#emit('response', rec, error));
    if (recorded) return res;
    const failure = new AuditFailureError('response');
    return { status: failure.status, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ errors: failure.messages }) };
  }

  /** SIGHUP: file devices close and reopen their files after the lines already queued. */
  async reopen(): Promise<void> {
    await Promise.all(this.#devices.map((d) => d.reopen().catch((err: unknown) => {
      this.#logger.warn({ audit_device: d.entry.path, reason: reason(err) }, 'audit device could not reopen its file; its writes fail until it can');
    })));
  }

  async close(): Promise<void> {
    await this.#serial(async () => {
      const devices = this.#devices;
      this.#devices = [];
      this.enabled = false;
      await Promise.all(devices.map((d) => d.close()));
    });
  }

  /** Failed writes per device since it was opened on this node, for `vault_audit_log_request_failure` / `_response_failure`. */
  failures(): Record<string, { type: string; request: number; response: number }> {
    return Object.fromEntries(this.#devices.map((d) => [d.entry.path, { type: d.entry.type, ...d.failures }]));
  }

  /**
   * Whether at least one device wrote the entry (vacuously, when none is enabled any more). A request to disable a
   * device is written to it too, but does not need it: disabling a device that fails must never be refused because
   * it fails, so such a request needs one of the others, or none when there are no others.
   */
  async #emit(kind: EntryKind, rec: AuditRecord, error: string | undefined): Promise<boolean> {
    const devices = this.#devices;
    if (devices.length === 0) return true;
    const disabling = disabledBy(rec);
    const time = this.#clock.now();
    let written = false;
    const settle = (d: Device) => {
      let line: Promise<void>;
      try {
        line = d.write(kind, rec, time, error);
      } catch (err) {
        line = Promise.reject(err);
      }
      return line.then(() => {
        written = true;
        d.succeeded(this.#logger);
      }, (err: unknown) => {
        const count = d.failed(kind, err, this.#logger, this.#clock.now());
        if (count !== undefined) this.#reportFailure(d, kind, err, count);
      });
    };
    await (devices.length === 1 ? settle(devices[0]) : Promise.all(devices.map(settle)));
    return written || (disabling !== undefined && devices.every((d) => d.entry.path === disabling));
  }

  /**
   * The `audit/device-fail` event, as often as the warning: the device, the entry's kind and the file or socket error
   * (which names the target and the system's code), nothing of the request. Its own commit, not awaited: the request's
   * answer does not wait for it, and one the store cannot take is logged, not retried (the next warning reports again).
   */
  #reportFailure(d: Device, kind: EntryKind, err: unknown, count: number): void {
    const metadata = { path: `sys/audit/${d.entry.path}`, device_type: d.entry.type, entry: kind, error: reason(err), failed_writes: String(count) };
    void this.#onFailure?.(metadata).catch((e: unknown) => this.#logger.debug({ reason: reason(e) }, 'the audit device failure could not be recorded as an event'));
  }

  async #read(): Promise<{ table: AuditDeviceEntry[]; stored: Buffer | undefined }> {
    const stored = await this.#view.get(TABLE_KEY);
    return { table: stored ? z.array(deviceEntrySchema).parse(JSON.parse(stored.toString('utf8'))) : [], stored };
  }

  /** Opens what the table adds (`opened` is one already open), closes what it drops; devices are known by uuid. */
  async #apply(table: AuditDeviceEntry[], opened?: Device): Promise<void> {
    const current = new Map(this.#devices.map((d) => [d.entry.uuid, d]));
    const next: Device[] = [];
    for (const entry of table) next.push(current.get(entry.uuid) ?? (entry.uuid === opened?.entry.uuid ? opened : await this.#open(entry)));
    const kept = new Set(next);
    this.#devices = next;
    this.enabled = next.length > 0;
    await Promise.all([...current.values()].filter((d) => !kept.has(d)).map((d) => d.close()));
  }

  async #open(entry: AuditDeviceEntry): Promise<Device> {
    const salt = await this.#view.get(saltKey(entry.uuid));
    let config: DeviceConfig | Error;
    try {
      if (!salt) throw new Error('its salt is missing from storage');
      config = deviceConfig(entry.type, entry.options, this.#settings);
    } catch (err) {
      config = err as Error;
      this.#logger.error({ audit_device: entry.path, type: entry.type, reason: reason(err) }, 'audit device cannot be built from its stored configuration; every write to it fails until it is disabled');
    }
    if (!(config instanceof Error)) {
      await config.sink.open().catch((err: unknown) => this.#logger.warn({ audit_device: entry.path, type: entry.type, reason: reason(err) }, 'audit device cannot be opened; its writes fail until it can'));
    }
    return new Device(entry, salt?.toString('utf8') ?? '', config);
  }

  #serial<T>(op: () => Promise<T>): Promise<T> {
    const run = this.#changes.then(op);
    this.#changes = run.catch(() => undefined);
    return run;
  }
}
