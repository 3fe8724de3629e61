/**
 * `LIST rotation-failures`: every account of the mount whose password the server cannot keep right now, in Vault's
 * LIST shape (`keys`, `key_info`). Read from storage on every call, so every node of a cluster answers the same
 * whichever of them runs the rotations; the metric of the same name counts the same entries (metrics.ts).
 *
 * Two kinds: `rotation`, a static role whose last rotation failed (it keeps retrying inside its windows); `drift`, an
 * account whose drift mark says the directory no longer takes the password the server holds. A static role with both
 * is listed once, as `drift`: the password it serves does not open the account, which matters more than a failed
 * change. Library check-ins keep no failure state of their own (an interrupted one stays `returning` and is finished
 * by its lease or the next check-in), so library accounts appear only with drift marks. A third kind, `bind-account`,
 * is a static role an earlier version let manage the engine's own bind account (bind-account-roles.ts): it is listed
 * before anything else, as its password is never served.
 */
import { definePath } from '../../core/framework.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { listDriftMarks, type DriftMark } from './drift-marks.ts';
import { readStaticRoles, rfc3339, staticRoleTarget, type StaticRole } from './static-role-store.ts';
import { BIND_ACCOUNT_ROLE_ERROR, bindAccountRoles, storedBindAccount } from './bind-account-roles.ts';
import type { AccountIdentity } from './accounts.ts';

export type FailureKind = 'rotation' | 'drift' | 'bind-account';

export interface RotationFailure {
  kind: FailureKind;
  /** RFC 3339: the first failure since the last success, or when the drift was first found. */
  since: string;
  attempts: number;
  /** Never a secret: messages are written for clients. Empty when a drift has had no failed take-back. */
  last_error: string;
}

const STATIC_PREFIX = staticRoleTarget('');
/** Library accounts' keys: role names cannot hold ":", so no key of an account can be a role's. */
const LIBRARY_KEY = 'library:';

/**
 * The mount's failures by key: a static role's name, or `library:<account>` (the rest of its drift mark's target).
 * `bind` is the engine's bind account as storage names it.
 */
export function rotationFailures(roles: StaticRole[], marks: DriftMark[], bind?: AccountIdentity): Map<string, RotationFailure> {
  const out = new Map<string, RotationFailure>();
  for (const role of roles) {
    if (role.failed_attempts === 0) continue;
    out.set(role.name, { kind: 'rotation', since: rfc3339(role.failing_since || role.last_error_time), attempts: role.failed_attempts, last_error: role.last_error });
  }
  for (const mark of marks) {
    const key = mark.target.startsWith(STATIC_PREFIX) ? mark.target.slice(STATIC_PREFIX.length) : LIBRARY_KEY + mark.target.replace(/^library\//, '');
    const failing = out.get(key);
    out.set(key, { kind: 'drift', since: rfc3339(mark.detected_at), attempts: mark.attempts, last_error: mark.last_error || failing?.last_error || '' });
  }
  for (const role of bindAccountRoles(roles, bind)) {
    const failing = out.get(role.name);
    out.set(role.name, { kind: 'bind-account', since: failing?.since ?? rfc3339(role.last_rotation), attempts: failing?.attempts ?? 0, last_error: BIND_ACCOUNT_ROLE_ERROR });
  }
  return out;
}

/** Every static role and drift mark of the mount, read now. */
export async function readRotationFailures(engine: Pick<LdapEngine, 'storage'>, roles?: StaticRole[]): Promise<Map<string, RotationFailure>> {
  const stored = roles ?? (await readStaticRoles(engine.storage));
  return rotationFailures(stored, await listDriftMarks(engine.storage), await storedBindAccount(engine));
}

export function rotationFailuresPart(engine: LdapEngine): LdapEnginePart {
  return {
    paths: [
      definePath({
        pattern: 'rotation-failures/?',
        description: 'List the static roles whose rotation keeps failing and the accounts whose password drifted, with since when, how many attempts and the last error.',
        operations: {
          list: async () => {
            const failures = [...(await readRotationFailures(engine))].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
            return { data: { keys: failures.map(([key]) => key), key_info: Object.fromEntries(failures) } };
          },
        },
      }),
    ],
  };
}
