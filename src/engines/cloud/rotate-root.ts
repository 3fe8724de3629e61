/**
 * rotate-root: add a password to the engine's own application, switch to it once it authenticates,
 * then remove the password it replaced - that one only (Vault deletes every other password on the
 * application, including ones people or other tools rely on).
 *
 * The new secret is stored as `pending_root` before anything else depends on it, so a crash at any
 * point leaves a secret the engine can still use: before the switch the old one still works and
 * the leader resumes the switch; after it the new one is the config's. A password added but not
 * yet recorded is covered by the creation WAL.
 *
 * With `rotation_period` or `rotation_schedule` on the config the leader also starts it on schedule
 * (root-rotation.ts). Only the start is fenced (the write of `pending_root`): a switch once begun is finished by
 * whichever node leads, as after a crash.
 */
import { BadRequestError, UpstreamError } from '../../core/errors.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import { scopeFor } from '../../providers/azure/environments.ts';
import { withRetry, type RetryOptions } from '../../providers/azure/retry.ts';
import { effectiveConfig, overriddenFields, readConfig, readConfigSnapshot, updateConfigGuarded, writeConfig, writeConfigGuarded, type CloudConfig, type PendingRoot } from './config.ts';
import type { CloudEngine } from './engine.ts';
import { cloudEvent } from './events.ts';
import { DEFAULT_ROOT_BACKOFF, failedState, rootRotationPlan, rootRotationTimer, rotatedState, type RetryBackoff } from '../root-rotation.ts';
import type { LeaderTimer } from '../leader-timer.ts';
import type { MountMetrics } from '../../core/framework.ts';
import { ROTATE_ROOT, counted } from '../../telemetry/families.ts';

/** Entra answers "invalid client secret" until a new password has reached every replica. */
const NOT_PROPAGATED = (i: { code?: string }): boolean => i.code === 'AADSTS7000215';
const FINISH_RETRY_MS = 60_000;

export interface RotateRootOptions {
  /** How long one attempt waits for the new password to authenticate. */
  propagation?: RetryOptions;
  /** Retries of a failed automated rotation (default: the static roles' backoff). */
  backoff?: RetryBackoff;
}

/** The automated rotation's state as the leader's timer reads it: none while a switch is pending (resume finishes it). */
const scheduledState = (c: CloudConfig | undefined): CloudConfig | undefined => (c?.pending_root ? undefined : c);

export class RootRotation {
  readonly #engine: CloudEngine;
  readonly #opts: RotateRootOptions;
  readonly #timer: LeaderTimer;
  #cancelRetry: (() => void) | undefined;

  constructor(engine: CloudEngine, metrics: MountMetrics, opts: RotateRootOptions = {}) {
    this.#engine = engine;
    this.#opts = opts;
    this.#timer = rootRotationTimer({
      clock: engine.clock,
      logger: engine.logger,
      metrics,
      read: async () => scheduledState(await readConfig(engine.storage)),
      rotate: async () => (await this.rotate({ scheduled: true })) !== undefined,
      recordFailure: (message) => this.#recordFailure(message),
    });
  }

  /** On the leader: finishes an interrupted switch, then runs the automated rotation. */
  async lead(): Promise<void> {
    await this.resume();
    await this.#timer.start();
  }

  /** Re-reads the automated rotation's schedule (a config write). */
  refresh(): Promise<void> {
    return this.#timer.refresh();
  }

  /**
   * Starts a rotation; returns warnings when the switch could not be completed yet. `scheduled` is the leader's
   * automated rotation: only when still due, and only while this node leads; undefined when it did nothing.
   */
  rotate(opts: { scheduled: true }): Promise<string[] | undefined>;
  rotate(): Promise<string[]>;
  rotate({ scheduled = false } = {}): Promise<string[] | undefined> {
    return this.#engine.locks.run('config', async () => {
      const e = this.#engine;
      const snapshot = await readConfigSnapshot(e.storage);
      const stored = snapshot?.config;
      if (scheduled) {
        const plan = scheduledState(stored) && rootRotationPlan(stored!, e.clock.now());
        if (!plan || plan.runAt > e.clock.now() || !e.system.leading()) return undefined;
      }
      if (!stored) throw new BadRequestError('the cloud engine is not configured: write config first');
      const fromEnv = overriddenFields(e.env).filter((f) => f === 'client_id' || f === 'client_secret');
      if (fromEnv.length) throw new BadRequestError(`rotate-root cannot rotate credentials set by environment variables (${fromEnv.join(', ')}); rotate them where they are set`);
      if (stored.identity_token_audience) {
        throw new BadRequestError('rotate-root does not apply to workload identity federation: the engine holds no client secret (it authenticates with plugin identity tokens for identity_token_audience); remove identity_token_audience and set client_secret to use it');
      }
      if (!stored.client_secret) throw new BadRequestError('rotate-root needs a client_id and client_secret in config');
      if (stored.pending_root) return this.#finish(stored, stored.pending_root, scheduled);

      const config = effectiveConfig(stored, e.env);
      const { graph } = e.clientsFor(config);
      const app = await graph.findApplicationByAppId(config.client_id);
      if (!app) throw new BadRequestError(`invalid value for field "client_id": no application found with appId '${config.client_id}'`);
      const warnings: string[] = [];
      // Identified now, while the old secret is the config's: resuming later must never guess.
      let previousKeyId = stored.client_secret_key_id;
      if (!previousKeyId) {
        const byHint = app.passwordCredentials.filter((p) => p.hint && stored.client_secret.startsWith(p.hint));
        if (byHint.length === 1) previousKeyId = byHint[0].keyId;
        else warnings.push('the previous root password could not be identified among the application\'s passwords; it was not removed');
      }

      const displayName = `strongroom-root-${newUuid()}`;
      const expiration = new Date(e.clock.now() + stored.root_password_ttl * 1000);
      const walId = await e.wal.begin({ kind: 'password', created_at: 0, app_object_id: app.id, display_name: displayName });
      let pending: PendingRoot;
      try {
        const added = await graph.addApplicationPassword(app.id, { displayName, endDateTime: expiration });
        pending = { client_secret: added.secretText, key_id: added.keyId, display_name: displayName, expiration: added.endDateTime, previous_key_id: previousKeyId, app_object_id: app.id };
        if (!scheduled) await writeConfig(e.storage, { ...stored, pending_root: pending });
        else if (!(await writeConfigGuarded(e.storage, { ...stored, pending_root: pending }, snapshot?.raw, [e.system.fence()]))) {
          // No longer the leader, or the config changed meanwhile: the password added is taken away again.
          await e.wal.compensate(walId, e.clientsFor(config));
          return undefined;
        }
      } catch (err) {
        await e.wal.compensate(walId, e.clientsFor(config));
        throw err;
      }
      await e.wal.commit(walId);
      return [...warnings, ...(await this.#finish({ ...stored, pending_root: pending }, pending, scheduled))];
    });
  }

  /** Resumes a rotation a restart or a slow propagation interrupted. */
  async resume(): Promise<void> {
    await this.#engine.locks.run('config', async () => {
      const stored = await readConfig(this.#engine.storage);
      if (stored?.pending_root) await this.#finish(stored, stored.pending_root, true);
    });
  }

  /** Step-down and shutdown: no more retries or automated rotations here. */
  async stop(): Promise<void> {
    this.#cancelRetry?.();
    this.#cancelRetry = undefined;
    await this.#timer.stop();
  }

  /** Records a failed automated rotation over the config as read, fenced; a config written meanwhile is not undone. */
  async #recordFailure(message: string): Promise<void> {
    const e = this.#engine;
    await e.locks.run('config', () => updateConfigGuarded(e.storage, (config) => {
      const next = failedState(config, e.clock.now(), message, this.#opts.backoff ?? DEFAULT_ROOT_BACKOFF);
      const event = cloudEvent(e.system, 'rotate-root-fail', { operation: 'periodic', path: 'rotate-root', error: message, attempts: next.root_rotation_failures });
      return { config: next, alongside: [e.system.fence(), event] };
    }, () => !e.system.leading()));
  }

  /** `background`: the leader's automated rotation or its resumption of one (the event's operation is `periodic`). */
  async #finish(stored: CloudConfig, pending: PendingRoot, background: boolean): Promise<string[]> {
    const e = this.#engine;
    const next = effectiveConfig({ ...stored, client_secret: pending.client_secret }, e.env);
    const clients = e.clientsFor(next);
    try {
      await withRetry(() => clients.credential.getToken(scopeFor(clients.environment.microsoftGraphEndpoint)), {
        deadlineMs: 30_000, ...this.#opts.propagation, notReplicated: NOT_PROPAGATED,
      });
    } catch (err) {
      e.logger.warn({ err: (err as Error).message }, 'the new root password does not authenticate yet; the switch will be retried');
      this.#scheduleRetry();
      return ['the new root password does not authenticate yet; the engine keeps using the previous one and switches automatically once it does'];
    }
    if (pending.previous_key_id && pending.previous_key_id !== pending.key_id) {
      try {
        await clients.graph.removeApplicationPassword(pending.app_object_id, pending.previous_key_id);
      } catch (err) {
        throw new UpstreamError(`the new root password works but the previous one could not be removed (will be retried by the next rotate-root): ${(err as Error).message}`);
      }
    }
    // Recorded over the config as it is now while this switch is still pending there: another node finishing the same
    // switch (a leader resuming it) records it once, with its event, and the other records nothing. A config written
    // meanwhile on another node is kept (read again, a few times; past them the leader's resume records the switch,
    // and the answer says so instead of claiming it done).
    const recorded = await updateConfigGuarded(e.storage, (config) => (config.pending_root?.key_id !== pending.key_id ? undefined : {
      config: {
        ...rotatedState(config, e.clock.now()), client_secret: pending.client_secret, client_secret_key_id: pending.key_id,
        root_password_expiration_date: pending.expiration, pending_root: null,
      },
      alongside: [cloudEvent(e.system, 'rotate-root', { operation: background ? 'periodic' : 'update', path: 'rotate-root' })],
    }));
    e.invalidate();
    // The next automated rotation counts from this one (a no-op off the leader, or inside the timer's own run).
    void this.#timer.refresh();
    if (recorded !== 'raced') return [];
    e.logger.warn('the new root password works but recording the switch lost every race with other config writes; the leader\'s resume records it');
    return ['the new root password is in use, but the switch is not recorded yet (the config kept changing): the leader\'s resume records it'];
  }

  /** On the leader; elsewhere the leader's periodic resume of a shared store finishes the switch. */
  #scheduleRetry(): void {
    if (this.#cancelRetry || !this.#engine.system.leading()) return;
    this.#cancelRetry = this.#engine.clock.setTimer(FINISH_RETRY_MS, () => {
      this.#cancelRetry = undefined;
      void this.resume().catch((err) => this.#engine.logger.warn({ err: (err as Error).message }, 'resuming rotate-root failed'));
    });
  }
}

export function rotateRootPaths(rotation: RootRotation, metrics: MountMetrics): PathDefinition[] {
  return [
    definePath({
      pattern: 'rotate-root',
      description: 'Replace the client secret of the configured application with one only the engine knows.',
      operations: {
        update: async () => {
          const warnings = await counted(metrics, ROTATE_ROOT, () => rotation.rotate());
          return warnings.length ? { warnings } : undefined;
        },
      },
    }),
  ];
}
