/** `static-cred/:name` (the current password) and `rotate-role/:name` (rotate now). */
import { BadRequestError, NotFoundError, StrongroomError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, lowerName } from '../../core/framework.ts';
import { refuseServingBindAccount, reportBindAccountRoles } from './bind-account-roles.ts';
import { CONFIG_KEY } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { GracePeriodError } from './dual-account.ts';
import { StaticCredCache } from './static-cred-cache.ts';
import { rotateStaticRole } from './static-role-rotation.ts';
import { NAME_PATTERN, readStaticRole } from './static-role-store.ts';

export function staticCredsPart(engine: LdapEngine): LdapEnginePart {
  const cache = new StaticCredCache();
  return {
    // Reported, never fatal: a failed scan must not keep the mount from starting.
    initialize: () => reportBindAccountRoles(engine).catch((err: unknown) => engine.ctx.logger.warn({ mount: engine.ctx.mount.path, err: (err as Error).message }, 'the scan for static roles on the bind account failed')),
    paths: [
      definePath({
        pattern: `static-cred/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Read the current password of a static role.',
        operations: {
          read: async (req) => {
            const name = req.params.name!.toLowerCase();
            // The bind-account refusal is checked again whenever the role or the config changes, not on every read.
            const data = await cache.read(engine.storage, name, engine.clock, { key: CONFIG_KEY, check: (role) => refuseServingBindAccount(engine, role) });
            if (!data) throw new NotFoundError(`unknown role: ${name}`);
            return { data };
          },
        },
      }),
      definePath({
        pattern: `rotate-role/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Rotate the password of a static role now; a period restarts from this rotation, a schedule keeps its occurrences.',
        fields: {
          force: field.bool('A dual-account role: rotate even during its grace period (clients still on the previous account are cut off) or over a drifted standby.'),
        },
        operations: {
          update: async (req) => {
            const name = req.params.name!.toLowerCase();
            try {
              const rotated = await rotateStaticRole(engine, name, { force: req.data.force === true });
              if (!rotated) throw new BadRequestError(`role doesn't exist: ${name}`);
            } catch (err) {
              if (!(err instanceof StrongroomError) || err instanceof GracePeriodError || err.status === 400 && err.message.startsWith("role doesn't exist")) throw err;
              const manual = (await readStaticRole(engine.storage, name).catch(() => undefined))?.disable_automated_rotation;
              const next = manual ? 'automated rotation is disabled for this role, so retry manually' : 'retries will continue in the background but it is also safe to retry manually';
              throw new StrongroomError(err.status, `unable to finish rotating credentials; ${next}: ${err.message}`);
            }
          },
        },
      }),
    ],
  };
}
