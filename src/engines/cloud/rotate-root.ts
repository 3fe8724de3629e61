/**
 * rotate-root: add a password to the engine's own application, switch to it once it authenticates,
 * then remove the password it replaced - that one only (Vault deletes every other password on the
 * application, including ones people or other tools rely on).
 *
 * The new secret is stored as `pending_root` before anything else depends on it, so a crash at any
 * point leaves a secret the engine can still use: before the switch the old one still works and
 * the leader resumes the switch; after it the new one is the config's. A password added but not
 * yet recorded is covered by the creation WAL.
 */
import { BadRequestError, UpstreamError } from '../../core/errors.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import { scopeFor } from '../../providers/azure/environments.ts';
import { withRetry, type RetryOptions } from '../../providers/azure/retry.ts';
import { effectiveConfig, overriddenFields, readConfig, writeConfig, type CloudConfig, type PendingRoot } from './config.ts';
import type { CloudEngine } from './engine.ts';
import { ROTATE_ROOT, counted, type MountMetrics } from '../../telemetry/families.ts';

/** Entra answers "invalid client secret" until a new password has reached every replica. */
const NOT_PROPAGATED = (i: { code?: string }): boolean => i.code === 'AADSTS7000215';
const FINISH_RETRY_MS = 60_000;

export interface RotateRootOptions {
  /** How long one attempt waits for the new password to authenticate. */
  propagation?: RetryOptions;
}

export class RootRotation {
  readonly #engine: CloudEngine;
  readonly #opts: RotateRootOptions;
  #cancelRetry: (() => void) | undefined;

  constructor(engine: CloudEngine, opts: RotateRootOptions = {}) {
    this.#engine = engine;
    this.#opts = opts;
  }

  /** Starts a rotation; returns warnings when the switch could not be completed yet. */
  rotate(): Promise<string[]> {
    return this.#engine.locks.run('config', async () => {
      const e = this.#engine;
      const stored = await readConfig(e.storage);
      if (!stored) throw new BadRequestError('the cloud engine is not configured: write config first');
      const fromEnv = overriddenFields(e.env).filter((f) => f === 'client_id' || f === 'client_secret');
      if (fromEnv.length) throw new BadRequestError(`rotate-root cannot rotate credentials set by environment variables (${fromEnv.join(', ')}); rotate them where they are set`);
      if (stored.identity_token_audience) {
        throw new BadRequestError('rotate-root does not apply to workload identity federation: the engine holds no client secret (it authenticates with plugin identity tokens for identity_token_audience); remove identity_token_audience and set client_secret to use it');
      }
      if (!stored.client_secret) throw new BadRequestError('rotate-root needs a client_id and client_secret in config');
      if (stored.pending_root) return this.#finish(stored, stored.pending_root);

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
        await writeConfig(e.storage, { ...stored, pending_root: pending });
      } catch (err) {
        await e.wal.compensate(walId, e.clientsFor(config));
        throw err;
      }
      await e.wal.commit(walId);
      return [...warnings, ...(await this.#finish({ ...stored, pending_root: pending }, pending))];
    });
  }

  /** Resumes a rotation a restart or a slow propagation interrupted. */
  async resume(): Promise<void> {
    await this.#engine.locks.run('config', async () => {
      const stored = await readConfig(this.#engine.storage);
      if (stored?.pending_root) await this.#finish(stored, stored.pending_root);
    });
  }

  stop(): void {
    this.#cancelRetry?.();
    this.#cancelRetry = undefined;
  }

  async #finish(stored: CloudConfig, pending: PendingRoot): Promise<string[]> {
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
    await writeConfig(e.storage, {
      ...stored, client_secret: pending.client_secret, client_secret_key_id: pending.key_id,
      root_password_expiration_date: pending.expiration, pending_root: null,
    });
    e.invalidate();
    return [];
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
