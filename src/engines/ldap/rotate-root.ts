/**
 * `rotate-root`: a new bind password that only the server knows. The change goes through the same
 * write-ahead path as every other password (target `root`, WAL at `wal/root`); while that WAL
 * exists the client also tries its password, so the engine keeps working whichever password the
 * directory ended up with. After success the previous password stays a bind fallback for at least
 * ROOT_GRACE_MS (replicas that have not caught up), and is erased only once a bind with the recorded
 * password is verified (a late directory write may have put an older one back: then the recorded one is
 * written again through the fallback first). Older unconfirmed passwords are kept alike (bind-history.ts).
 *
 * With `rotation_period` or `rotation_schedule` on the config the leader also runs it on schedule
 * (root-rotation.ts): the same change, fenced as leader work.
 */
import { definePath } from '../../core/framework.ts';
import type { StorageCondition } from '../../core/storage/types.ts';
import { CONFIG_KEY, ROOT_GRACE_MS, putConfigOp, readConfig, readConfigSnapshot } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { bindHistory } from './bind-history.ts';
import { FencedWriteError, verifyDirectoryPassword, type VerifiedAccount } from './directory-writes.ts';
import { changePasswordWithWal, readWal } from './rotation.ts';
import { failedState, rootRotationPlan, rootRotationTimer, rotatedState } from '../root-rotation.ts';
import { ROTATE_ROOT, counted } from '../../telemetry/families.ts';

export const ROOT_TARGET = 'root';

/** How soon a previous bind password's erasure is tried again after the directory could not be verified. */
const ERASE_RETRY_MS = 60_000;
/** When each engine last failed to verify bindpass: the leader's periodic refresh does not bind again before the retry. */
const unverifiedAt = new WeakMap<LdapEngine, number>();

/** The bind account as directory-writes.ts verifies it: the config's bindpass on the bind entry (`dn` when known). */
function bindAccountCheck(engine: LdapEngine, dn?: string): VerifiedAccount {
  return {
    target: ROOT_TARGET,
    recorded: async () => {
      const config = await readConfig(engine.storage);
      if (!config) return undefined;
      return { dn: dn ?? (await (await engine.connections.get()).client.findBindEntry()).dn, password: config.bindpass };
    },
    pending: async () => (await readWal(engine.storage, ROOT_TARGET))?.new_password,
  };
}

/**
 * Rotates the bind password; finishes an unfinished rotation with its WAL password first. `scheduled` is the leader's
 * automated rotation: only when it is still due (a rotate-root elsewhere moves it) and only while this node leads (the
 * fence). `fenced` alone is other leader work (finishing an interrupted rotation at takeover). False when nothing was
 * rotated, or this node stopped leading.
 */
export async function rotateRoot(engine: LdapEngine, { scheduled = false, fenced = scheduled }: { scheduled?: boolean; fenced?: boolean } = {}): Promise<boolean> {
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
        // The previous one and every older one not yet verified away stay fallbacks: a late write may put one back.
        const unconfirmed = bindHistory([current.last_bind_password, ...current.unconfirmed_bind_passwords].filter((p) => p !== current.bindpass), password);
        return [putConfigOp({
          ...rotatedState(current, now), bindpass: password, last_bind_password: current.bindpass, last_bind_password_rotation: now, unconfirmed_bind_passwords: unconfirmed,
        })];
      },
      commitConditions,
      commitAlongside: async () => [engine.ctx.system.event('ldap/rotate-root', { modified: 'true', operation: fenced ? 'periodic' : 'update', path: 'rotate-root' })],
      fence: fenced ? engine.ctx.system.fence() : undefined,
      recorded: bindAccountCheck(engine, entry.dn).recorded,
    }).catch((err: unknown) => {
      if (!(err instanceof FencedWriteError)) throw err;
      engine.ctx.logger.warn({ err: { message: err.message } }, 'rotate-root stopped: this node no longer leads');
      return undefined;
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
      const event = engine.ctx.system.event('ldap/rotate-root-fail', { modified: 'false', operation: 'periodic', path: 'rotate-root', error: message, attempts: String(next.root_rotation_failures) });
      if (await engine.storage.transaction([putConfigOp(next)], [{ key: CONFIG_KEY, expected: raw }], [engine.ctx.system.fence(), event])) return;
      if (!engine.ctx.system.leading()) return;
    }
  });
}

/** Erases the previous bind passwords once their grace period is over and bindpass is verified; tries again until then. */
function scheduleGraceEnd(engine: LdapEngine, delayMs = ROOT_GRACE_MS + 1): void {
  engine.clock.setTimer(delayMs, () => void eraseExpiredPrevious(engine).then((kept) => {
    if (kept && engine.ctx.system.leading()) scheduleGraceEnd(engine, ERASE_RETRY_MS);
  }, (err: unknown) => engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'erasing the previous bind password failed')));
}

/**
 * Leader work, fenced, and guarded on the config as read: a config written meanwhile is not undone. A password is
 * erased only after a bind with bindpass is verified (repaired first when the directory refuses it): true when the
 * previous passwords had to be kept for now.
 */
export async function eraseExpiredPrevious(engine: LdapEngine): Promise<boolean> {
  return engine.locks.run(CONFIG_KEY, async () => {
    const snapshot = await readConfigSnapshot(engine.storage);
    if (!snapshot) return false;
    const { config, raw } = snapshot;
    if (!config.last_bind_password && !config.unconfirmed_bind_passwords.length) return false;
    if (engine.clock.now() - config.last_bind_password_rotation < ROOT_GRACE_MS) return false;
    if (!engine.ctx.system.leading()) return false;
    if (engine.clock.now() - (unverifiedAt.get(engine) ?? -Infinity) < ERASE_RETRY_MS) return true;
    const result = await engine.locks.run(`wal/${ROOT_TARGET}`, () => verifyDirectoryPassword(engine, bindAccountCheck(engine), 'grace_end'));
    if (result !== 'verified' && result !== 'repaired') {
      engine.ctx.logger.warn({ result }, 'the previous bind passwords are kept: a bind with the recorded one could not be verified');
      unverifiedAt.set(engine, engine.clock.now());
      return true;
    }
    await engine.storage.transaction([putConfigOp({ ...config, last_bind_password: '', unconfirmed_bind_passwords: [] })],
      [{ key: CONFIG_KEY, expected: raw }], [engine.ctx.system.fence()]);
    return false;
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
      if (config?.last_bind_password || config?.unconfirmed_bind_passwords.length) {
        // Never waited for here: the erasure binds to the directory first.
        scheduleGraceEnd(engine, Math.max(0, config.last_bind_password_rotation + ROOT_GRACE_MS - engine.clock.now()) + 1);
      }
      // A rotate-root that crashed or failed to record its result: finish it with the same password, as leader work.
      if (config && (await readWal(engine.storage, ROOT_TARGET))) {
        void rotateRoot(engine, { fenced: true }).then(() => timer.refresh(), (err: unknown) =>
          engine.ctx.logger.warn({ err: { message: (err as Error).message } }, 'finishing an interrupted rotate-root failed; the next rotate-root retries it'));
      }
      await timer.start();
    },
    stepDown: () => timer.stop(),
  };
}
