/** `static-cred/:name` (the current password) and `rotate-role/:name` (rotate now). */
import { BadRequestError, StrongroomError } from '../../core/errors.ts';
import { definePath, lowerName } from '../../core/framework.ts';
import type { LdapEngine, LdapEnginePart } from './config.ts';
import { NAME_PATTERN, readStaticRole, rfc3339, rotateStaticRole } from './static-roles.ts';

export function staticCredsPart(engine: LdapEngine): LdapEnginePart {
  return {
    paths: [
      definePath({
        pattern: `static-cred/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Read the current password of a static role.',
        operations: {
          read: async (req) => {
            const name = req.params.name!.toLowerCase();
            const role = await readStaticRole(engine.storage, name);
            if (!role) throw new BadRequestError(`unknown role: ${name}`);
            return {
              data: {
                dn: role.dn,
                username: role.username,
                password: role.password,
                last_password: role.last_password,
                last_service_rotation: rfc3339(role.last_rotation),
                rotation_period: role.rotation_period,
                ttl: Math.max(0, Math.round((role.next_rotation - engine.clock.now()) / 1000)),
              },
            };
          },
        },
      }),
      definePath({
        pattern: `rotate-role/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Rotate the password of a static role now; the period restarts from this rotation.',
        operations: {
          update: async (req) => {
            const name = req.params.name!.toLowerCase();
            try {
              const rotated = await rotateStaticRole(engine, name);
              if (!rotated) throw new BadRequestError(`role doesn't exist: ${name}`);
            } catch (err) {
              if (!(err instanceof StrongroomError) || err.status === 400 && err.message.startsWith("role doesn't exist")) throw err;
              throw new StrongroomError(err.status, `unable to finish rotating credentials; retries will continue in the background but it is also safe to retry manually: ${err.message}`);
            }
          },
        },
      }),
    ],
  };
}
