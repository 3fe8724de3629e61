/**
 * `rotate-root`: a new bind password that only the server knows. The change goes through the same
 * write-ahead path as every other password (target `root`, WAL at `wal/root`); while that WAL
 * exists the client also tries its password, so the engine keeps working whichever password the
 * directory ended up with. After success the previous password stays a bind fallback for
 * ROOT_GRACE_MS (replicas that have not caught up), then it is erased.
 *
 * With `rotation_period` or `rotation_schedule` on the config the leader also runs it on schedule
 * (root-rotation.ts): the same change, fenced as leader work.
 */
import { definePath } from '../../core/framework.ts';
import type { StorageCondition } from '../../core/storage/types.ts';
import { CONFIG_KEY, ROOT_GRACE_MS, putConfigOp, readConfig, readConfigSnapshot, type LdapEngine, type LdapEnginePart } from './config.ts';
import { changePasswordWithWal, readWal } from './rotation.ts';
import { failedState, rootRotationPlan, rootRotationTimer, rotatedState } from '../root-rotation.ts';
import { ROTATE_ROOT, counted } from '../../telemetry/families.ts';

export const ROOT_TARGET = 'root';

/**
 * Rotates the bind password; finishes an unfinished rotation with its WAL password first. `scheduled` is the leader's
 * automated rotation: only when it is still due (a rotate-root elsewhere moves it) and only while this node leads (the
 * fence). False when nothing was rotated.
 */
export async function rotateRoot(engine: LdapEngine, { scheduled = false } = {}): Promise<boolean> {
  const rotated = await engine.locks.run(CONFIG_KEY, async () => {
    if (scheduled) {
      const config = await readConfig(engine.storage);
      const plan = config && rootRotationPlan(config, engine.clock.now());
      if (!plan || plan.runAt > engine.clock.now()) return false;
    }
    const { client } = await engine.connections.get();
    const entry = await client.findBindEntry();
    // Filled by commit and read after it: the new password is recorded over the config as commit read it, so a config
    // written meanwhile on another node is not overwritten (the WAL keeps the password for the next attempt).
    const commitConditions: StorageCondition[] = [];
    const changed = await changePasswordWithWal(engine, {
      target: ROOT_TARGET,
      account: { dn: entry.dn },
      rotatesBindAccount: true,
      commit: async (password) => {
        const { config: current, raw } = (await readConfigSnapshot(engine.storage))!;
        commitConditions.push({ key: CONFIG_KEY, expected: raw });
        const now = engine.clock.now();
        return [putConfigOp({ ...rotatedState(current, now), bindpass: password, last_bind_password: current.bindpass, last_bind_password_rotation: now })];
      },
      commitConditions,
      fence: scheduled ? engine.ctx.system.fence() : undefined,
    });
    return changed !== undefined;
  });
  // The leader erases it; elsewhere the leader's periodic refresh of a shared store does.
  if (rotated && engine.ctx.system.leading()) scheduleGraceEnd(engine);
  return rotated;
}

/** Records a failed automated rotation over the config as read, fenced; a config written meanwhile is not undone. */
async function recordRootFailure(engine: LdapEngine, message: string): Promise<void> {
  const backoff = { baseMs: engine.options.retryBaseMs, maxMs: engine.options.retryMaxMs };
  await engine.locks.run(CONFIG_KEY, async () => {
    for (let attempt = 0; attempt < 3; attempt++) {
      const snapshot = await readConfigSnapshot(engine.storage);
      if (!snapshot) return;
      const { config, raw } = snapshot;
      const next = failedState(config, engine.clock.now(), message, backoff);
      if (await engine.storage.transaction([putConfigOp(next)], [{ key: CONFIG_KEY, expected: raw }], [engine.ctx.system.fence()])) return;
      if (!engine.ctx.system.leading()) return;
    }
  });
}

/** Erases the previous bind password once its grace period is over. */
function scheduleGraceEnd(engine: LdapEngine): void {
  engine.clock.setTimer(ROOT_GRACE_MS + 1, () => void eraseExpiredPrevious(engine).catch((err: unknown) =>
    engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'erasing the previous bind password failed')));
}

/** Leader work, fenced, and guarded on the config as read: a config written meanwhile is not undone. */
export async function eraseExpiredPrevious(engine: LdapEngine): Promise<void> {
  await engine.locks.run(CONFIG_KEY, async () => {
    const snapshot = await readConfigSnapshot(engine.storage);
    if (!snapshot) return;
    const { config, raw } = snapshot;
    if (!config.last_bind_password || engine.clock.now() - config.last_bind_password_rotation < ROOT_GRACE_MS) return;
    await engine.storage.transaction([putConfigOp({ ...config, last_bind_password: '' })], [{ key: CONFIG_KEY, expected: raw }], [engine.ctx.system.fence()]);
  });
}

export function rotateRootPart(engine: LdapEngine): LdapEnginePart {
  const timer = rootRotationTimer({
    clock: engine.clock,
    logger: engine.ctx.logger,
    metrics: engine.ctx.metrics,
    read: () => readConfig(engine.storage),
    rotate: () => rotateRoot(engine, { scheduled: true }),
    recordFailure: (message) => recordRootFailure(engine, message),
  });
  engine.configWatchers.push(() => timer.refresh());
  return {
    paths: [
      definePath({
        pattern: 'rotate-root',
        description: 'Rotate the bind password; the new one is known only to the server.',
        operations: {
          update: async () => {
            await counted(engine.ctx.metrics, ROTATE_ROOT, () => rotateRoot(engine));
            // The next automated rotation counts from this one.
            await timer.refresh();
          },
        },
      }),
    ],
    async lead() {
      const config = await readConfig(engine.storage);
      if (config?.last_bind_password) {
        const left = config.last_bind_password_rotation + ROOT_GRACE_MS - engine.clock.now();
        if (left <= 0) await eraseExpiredPrevious(engine);
        else scheduleGraceEnd(engine);
      }
      // A rotate-root that crashed or failed to record its result: finish it with the same password.
      if (config && (await readWal(engine.storage, ROOT_TARGET))) {
        void rotateRoot(engine).then(() => timer.refresh(), (err: unknown) =>
          engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'finishing an interrupted rotate-root failed; the next rotate-root retries it'));
      }
      await timer.start();
    },
    stepDown: () => timer.stop(),
  };
}
