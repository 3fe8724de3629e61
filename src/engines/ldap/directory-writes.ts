/**
 * A directory password write is "possibly applied until proven otherwise" (docs/ldap.md, "Directory writes").
 *
 * - Leader work checks its fence right before each write (FencedWriteError): a node that stopped leading, or whose
 *   clock says its lease may have lapsed (a paused process), sends nothing.
 * - After a write that was not recorded as applied (its answer never came, the directory refused it as stale, the
 *   fence or another guard refused its record), the directory is asked whether it takes the unfinished change's
 *   password (its WAL, which this or the next attempt records), or else the password the server serves. When it
 *   takes neither, a late write has undone a newer one: the recorded password is written again
 *   through the bind account, conditionally where the directory supports it, logged as an error and counted.
 */
import { StrongroomError } from '../../core/errors.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import { LDAP_DIRECTORY_VERIFICATIONS, type DirectoryWriteOutcome, type DirectoryWriteTarget } from '../../telemetry/families.ts';
import type { LdapEngine } from './engine.ts';

/** Leader work found this node no longer leading; nothing more of it was sent to the directory. */
export class FencedWriteError extends StrongroomError {
  constructor(target: string, when: 'before' | 'after') {
    super(503, when === 'before'
      ? `this node no longer leads the cluster: the password change of "${target}" stopped before its directory write`
      : `this node no longer leads the cluster: the password change of "${target}" reached the directory but was not recorded; the leader finishes it`);
    this.name = 'FencedWriteError';
  }
}

type Engine = Pick<LdapEngine, 'storage' | 'connections' | 'ctx'>;

/** Whether this node still leads under the fence's term: by its own lease clock, then by the store. */
export async function fenceHolds(engine: Engine, fence: PreparedWrite): Promise<boolean> {
  return engine.ctx.system.leading() && (await engine.storage.transaction([], [], [fence]));
}

/** Throws FencedWriteError unless the (optional) fence still holds: called right before a directory write of leader work. */
export async function checkFence(engine: Engine, target: string, fence: PreparedWrite | undefined): Promise<void> {
  if (fence && !(await fenceHolds(engine, fence))) throw new FencedWriteError(target, 'before');
}

/** The password the server serves for an account, and the entry it belongs to. */
export interface RecordedPassword {
  dn: string;
  password: string;
}

export interface VerifiedAccount {
  /** WAL target: `root`, `static-role/<name>`, `library/<account>`. */
  target: string;
  /** Read fresh from storage; undefined when the server serves no password for it (nothing to verify). */
  recorded(): Promise<RecordedPassword | undefined>;
  /** The unfinished change's password (its WAL), which the directory may hold without harm. */
  pending(): Promise<string | undefined>;
}

export type VerificationResult = 'verified' | 'pending' | 'repaired' | 'repair_failed' | 'error' | 'nothing';

function targetKind(target: string): DirectoryWriteTarget {
  if (target === 'root') return 'bind_account';
  return target.startsWith('library/') ? 'library' : 'static_role';
}

/**
 * Verifies (and when needed repairs) one account after a write whose outcome is `outcome`. Never throws: the caller
 * has its own error to report. Callers hold the account's WAL lock, so no change of it on this node interleaves.
 */
export async function verifyDirectoryPassword(engine: Engine, account: VerifiedAccount, outcome: DirectoryWriteOutcome): Promise<VerificationResult> {
  const { target } = account;
  const labels = { target: targetKind(target), outcome };
  const done = (result: Exclude<VerificationResult, 'nothing'>): VerificationResult => {
    engine.ctx.metrics.counter(LDAP_DIRECTORY_VERIFICATIONS).inc({ ...labels, result });
    return result;
  };
  try {
    const { client } = await engine.connections.get();
    const held = await account.recorded();
    if (!held) return 'nothing';
    // Read before the binds: a change of the entry after this read makes the repair's conditional write refused.
    const guard = await client.writeGuard(held.dn);
    // The unfinished change's password first: a write whose answer was lost, or that another node made first with the
    // same WAL, shows as that password, and the caller then records it.
    const pending = await account.pending();
    if (pending && pending !== held.password && (await client.authenticate(held.dn, pending))) return done('pending');
    if (await client.authenticate(held.dn, held.password)) return done('verified');
    engine.ctx.logger.error({ target, outcome, dn: held.dn, conditional: guard !== undefined },
      'LDAP REPAIR: the directory refuses the password this server serves (a late directory write undid a newer one); writing the recorded password again through the bind account');
    await client.setPassword(held.dn, held.password, guard);
    if (await client.authenticate(held.dn, held.password)) {
      engine.ctx.logger.error({ target, outcome }, 'LDAP REPAIR done: the directory takes the recorded password again');
      return done('repaired');
    }
    engine.ctx.logger.error({ target, outcome }, 'LDAP REPAIR failed: the directory still refuses the recorded password');
    return done('repair_failed');
  } catch (err) {
    // Provider errors are scrubbed of the passwords they used; anything else is not shown.
    const message = err instanceof LdapProviderError ? err.message : 'internal error';
    engine.ctx.logger.error({ target, outcome, err: { message } }, 'LDAP verification after a directory password write failed; the next attempt or drift verification checks again');
    return done('error');
  }
}
