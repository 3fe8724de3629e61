/** `static-cred/:name` (the current password) and `rotate-role/:name` (rotate now). */
import { BadRequestError, StrongroomError } from '../../core/errors.ts';
import { definePath, lowerName } from '../../core/framework.ts';
import type { LdapEngine, LdapEnginePart } from './config.ts';
import { StaticCredCache } from './static-cred-cache.ts';
import { NAME_PATTERN, readStaticRole, rotateStaticRole } from './static-roles.ts';

export function staticCredsPart(engine: LdapEngine): LdapEnginePart {
  const cache = new StaticCredCache();
  return {
    paths: [
      definePath({
        pattern: `static-cred/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Read the current password of a static role.',
        operations: {
          read: async (req) => {
            const name = req.params.name!.toLowerCase();
            const data = await cache.read(engine.storage, name, engine.clock);
            if (!data) throw new BadRequestError(`unknown role: ${name}`);
            return { data };
          },
        },
      }),
      definePath({
        pattern: `rotate-role/(?<name>${NAME_PATTERN})`,
        canonical: { name: lowerName },
        description: 'Rotate the password of a static role now; a period restarts from this rotation, a schedule keeps its occurrences.',
        operations: {
          update: async (req) => {
            const name = req.params.name!.toLowerCase();
            try {
              const rotated = await rotateStaticRole(engine, name);
              if (!rotated) throw new BadRequestError(`role doesn't exist: ${name}`);
            } catch (err) {
              if (!(err instanceof StrongroomError) || err.status === 400 && err.message.startsWith("role doesn't exist")) throw err;
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
