/**
 * Drift detection (`verify_period`, `drift_action`, `verify_rate` on ldap/config): every verify_period the leader
 * binds as each static role and each available library account with the password the server holds. A bind the
 * directory refuses as invalidCredentials (result 49) means someone set the password outside the server: the
 * account gets a drift mark (drift-marks.ts), and with `drift_action: rotate` a new password through the bind
 * account, by the account's normal write-ahead rotation, whose commit clears the mark. A bind that works clears a
 * mark. Any other failure (the directory down, busy, a TLS error) says nothing about the password: it is counted
 * and logged as a verification error, never as drift, and after a few in a row the round stops.
 *
 * What is not verified: a lent library account (its borrower holds the password and may be using it; a bind as it
 * would add failed or successful logins to an account in use, and its check-in sets a new password anyway), an
 * account whose password the server does not hold (a static role imported without rotation), and an account whose
 * rotation is under way (its write-ahead log exists: the directory may hold either password).
 *
 * A mark lands only over the owner's record as the bind saw it and while no rotation began (compare-and-set on the
 * record and on the WAL's absence), so a rotation that changes the password between the read and the bind is never
 * taken for drift. Binds go one at a time, paced at verify_rate, each on a connection of its own (the client's
 * authenticate), so verification never holds the connection or the locks requests use.
 */
import { StrongroomError } from '../../core/errors.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import { LeaderTimer } from '../leader-timer.ts';
import { LDAP_DRIFT_TAKEBACKS, LDAP_DRIFT_VERIFICATIONS, type DriftTarget } from '../../telemetry/families.ts';
import { readConfig, type LdapConfig } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { clearDriftOp, markDriftOp, readDriftMark } from './drift-marks.ts';
import { accountWalTarget, retakeAvailableAccount } from './library-checkout.ts';
import { allLibrarySetNames, readAccount, readLibrarySet, unchangedAccount } from './library-store.ts';
import { accountOf, accountTarget, managedAccounts } from './dual-account.ts';
import { walKey } from './rotation.ts';
import { rotateStaticRole } from './static-role-rotation.ts';
import { listStaticRoleNames, readStaticRoleSnapshot, staticRoleKey, staticRoleTarget } from './static-role-store.ts';

/** Verification errors in a row after which a round stops: the directory is not answering, and every bind would fail alike. */
const MAX_ERRORS_IN_A_ROW = 3;

/** One account to verify, read when its turn comes. */
interface Candidate {
  kind: DriftTarget;
  /** The drift mark's target. */
  target: string;
  /** For logs: the role, or `<set>/<account>`. */
  name: string;
  /** The account as the server holds it now, with the guards a mark must land under; undefined: not verified. */
  read(): Promise<{ dn: string; password: string; guards: Array<{ key: string; expected: Buffer | undefined }> } | undefined>;
  /** drift_action rotate: a new password through the bind account, clearing the mark; false when there was nothing to do. */
  takeBack(fence: PreparedWrite): Promise<boolean>;
}

type Outcome = 'skipped' | 'verified' | 'drifted' | 'error';

async function candidates(engine: LdapEngine): Promise<Candidate[]> {
  const { storage } = engine;
  const out: Candidate[] = [];
  // A dual-account role's two accounts are verified alike (account b is skipped for a role without the mode).
  for (const name of await listStaticRoleNames(storage)) {
    for (const id of ['a', 'b'] as const) {
      const target = staticRoleTarget(name);
      out.push({
        kind: 'static_role', target: accountTarget(target, id), name: id === 'a' ? name : `${name}:b`,
        read: async () => {
          const snapshot = await readStaticRoleSnapshot(storage, name);
          const role = snapshot?.role;
          const account = role && managedAccounts(role).includes(id) ? accountOf(role, id) : undefined;
          const dn = account && (account.resolvedDn || account.dn);
          return account?.password && dn ? { dn, password: account.password, guards: [{ key: staticRoleKey(name), expected: snapshot!.raw }, { key: walKey(target), expected: undefined }] } : undefined;
        },
        // rotateStaticRole records a failure on the role itself, and rethrows it. Fenced like all leader work.
        takeBack: async (fence) => (await rotateStaticRole(engine, name, { takeBack: id, fence })) !== undefined,
      });
    }
  }
  for (const set of await allLibrarySetNames(storage)) {
    for (const account of (await readLibrarySet(storage, set))?.service_account_names ?? []) {
      out.push({
        kind: 'library', target: accountWalTarget(account), name: `${set}/${account}`,
        read: async () => {
          const snapshot = await readAccount(storage, account);
          if (snapshot?.state.state !== 'available' || !snapshot.state.password) return undefined;
          return { dn: snapshot.state.dn, password: snapshot.state.password, guards: [unchangedAccount(account, snapshot), { key: walKey(accountWalTarget(account)), expected: undefined }] };
        },
        takeBack: (fence) => retakeAvailableAccount(engine, account, fence),
      });
    }
  }
  return out;
}

/**
 * The leader's verification rounds: the first one verify_period after this node took over, each next one
 * verify_period after the previous began (or at once, when a round took longer). A config write re-reads the period.
 */
class DriftVerifier {
  readonly #engine: LdapEngine;
  readonly #timer: LeaderTimer;
  #leading = false;
  #lastStart = 0;
  /** Ends the pause between two binds at once (step-down). */
  #wake: (() => void) | undefined;

  constructor(engine: LdapEngine) {
    this.#engine = engine;
    this.#timer = new LeaderTimer({
      clock: engine.clock,
      next: async () => {
        const period = (await readConfig(engine.storage))?.verify_period ?? 0;
        return period > 0 ? this.#lastStart + period * 1000 : undefined;
      },
      run: () => {
        this.#lastStart = engine.clock.now();
        return this.#verifyAll();
      },
      onError: (err) => engine.ctx.logger.warn({ err: { message: (err as Error)?.message } }, 'drift verification round failed'),
    });
  }

  start(): Promise<void> {
    this.#leading = true;
    this.#lastStart = this.#engine.clock.now();
    return this.#timer.start();
  }

  async stop(): Promise<void> {
    this.#leading = false;
    this.#wake?.();
    await this.#timer.stop();
  }

  refresh(): Promise<void> {
    return this.#timer.refresh();
  }

  async #verifyAll(): Promise<void> {
    const engine = this.#engine;
    const config = await readConfig(engine.storage);
    if (!config?.verify_period) return;
    let errors = 0;
    for (const candidate of await candidates(engine)) {
      if (!this.#leading) return;
      const outcome = await this.#verify(candidate, config);
      if (outcome === 'skipped') continue;
      errors = outcome === 'error' ? errors + 1 : 0;
      if (errors >= MAX_ERRORS_IN_A_ROW) {
        engine.ctx.logger.warn({ errors }, 'drift verification stopped for this round: the directory does not answer');
        return;
      }
      await this.#pause(1000 / config.verify_rate);
    }
  }

  async #verify(candidate: Candidate, config: LdapConfig): Promise<Outcome> {
    const engine = this.#engine;
    const { kind, target, name } = candidate;
    const held = await candidate.read();
    if (!held) return 'skipped';
    let bound: boolean;
    try {
      const { client } = await engine.connections.get();
      bound = await client.authenticate(held.dn, held.password);
    } catch (err) {
      // Scrubbed of the password by the provider.
      engine.ctx.metrics.counter(LDAP_DRIFT_VERIFICATIONS).inc({ target: kind, result: 'error' });
      engine.ctx.logger.warn({ account: name, err: { message: (err as Error)?.message } }, 'drift verification could not bind (not counted as drift)');
      return 'error';
    }
    const fence = engine.ctx.system.fence();
    if (bound) {
      engine.ctx.metrics.counter(LDAP_DRIFT_VERIFICATIONS).inc({ target: kind, result: 'verified' });
      // Not logged as cleared when a guard refused it (a rotation began meanwhile, or this node no longer leads).
      if ((await readDriftMark(engine.storage, target)) && (await engine.storage.transaction([clearDriftOp(target)], held.guards, [fence, driftEvent(engine, 'ldap/drift-cleared', candidate)]))) {
        engine.ctx.logger.info({ account: name }, 'drift mark cleared: the password the server holds binds again');
      }
      return 'verified';
    }
    const current = await readDriftMark(engine.storage, target);
    // Not over a rotation that began or finished since the read: the directory may hold its password.
    // Announced once per drift: later rounds only refresh the mark.
    const detected = current ? [] : [driftEvent(engine, 'ldap/drift-detected', candidate)];
    if (!(await engine.storage.transaction([markDriftOp(current, target, engine.clock.now()).op], held.guards, [fence, ...detected]))) return 'skipped';
    engine.ctx.metrics.counter(LDAP_DRIFT_VERIFICATIONS).inc({ target: kind, result: 'drifted' });
    engine.ctx.logger.warn({ account: name, action: config.drift_action }, 'drift detected: the directory refuses the password the server holds');
    if (config.drift_action === 'rotate') await this.#takeBack(candidate, fence);
    return 'drifted';
  }

  async #takeBack(candidate: Candidate, fence: PreparedWrite): Promise<void> {
    const engine = this.#engine;
    const { kind, target, name } = candidate;
    try {
      // Nothing to take back when the account was lent, rotated or deleted meanwhile, or this node stopped leading.
      if (!(await candidate.takeBack(fence))) return;
      engine.ctx.metrics.counter(LDAP_DRIFT_TAKEBACKS).inc({ target: kind, result: 'success' });
      engine.ctx.logger.info({ account: name }, 'drifted account taken back with a new password');
    } catch (err) {
      engine.ctx.metrics.counter(LDAP_DRIFT_TAKEBACKS).inc({ target: kind, result: 'failure' });
      // Provider errors are scrubbed of the passwords they used; anything else is not shown.
      const message = err instanceof StrongroomError ? err.message : 'internal error';
      engine.ctx.logger.warn({ account: name, err: { message } }, 'taking back a drifted account failed; the next round tries again');
      const current = await readDriftMark(engine.storage, target);
      if (current) await engine.storage.transaction([markDriftOp(current, target, engine.clock.now(), message).op], [], [fence, driftEvent(engine, 'ldap/drift-take-back-fail', candidate, message)]).catch(() => undefined);
    }
  }

  /** Waits on the engine's clock; step-down ends the wait at once (or skips it, when it came during a bind). */
  #pause(ms: number): Promise<void> {
    if (!this.#leading) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const cancel = this.#engine.clock.setTimer(ms, () => resolve());
      this.#wake = () => {
        cancel();
        resolve();
      };
    }).finally(() => (this.#wake = undefined));
  }
}

export function driftPart(engine: LdapEngine): LdapEnginePart {
  const verifier = new DriftVerifier(engine);
  engine.configWatchers.push(() => verifier.refresh());
  return {
    paths: [],
    lead: () => verifier.start(),
    stepDown: () => verifier.stop(),
  };
}

/** Strongroom's own drift events (docs/events.md); `error` is a message written for clients. */
function driftEvent(engine: LdapEngine, type: string, { kind, name }: Pick<Candidate, 'kind' | 'name'>, error?: string): PreparedWrite {
  const path = kind === 'static_role' ? `static-role/${name}` : `library-account/${name}`;
  return engine.ctx.system.event(type, { modified: 'false', operation: 'verify', path, kind, account: name, ...(error === undefined ? {} : { error }) });
}
