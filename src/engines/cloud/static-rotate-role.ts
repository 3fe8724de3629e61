/**
 * `rotate-role/:name` (a manual rotation of a static role), `LIST rotation-failures` and the static roles' gauges.
 */
import { field } from '../../core/fields.ts';
import { definePath, lowerName, type MountMetrics, type PathDefinition } from '../../core/framework.ts';
import { CLOUD_STATIC_EXPIRY, CLOUD_STATIC_FAILING, shared } from '../../telemetry/families.ts';
import type { CloudEngine } from './engine.ts';
import { ROLE_NAME, roleName } from './roles.ts';
import type { StaticRotation } from './static-rotation.ts';
import { listStaticRoles, readStaticRole, servedSecret, type StaticRole } from './static-store.ts';

async function allRoles(engine: CloudEngine): Promise<Array<[string, StaticRole]>> {
  const out: Array<[string, StaticRole]> = [];
  for (const name of await listStaticRoles(engine.storage)) {
    const role = await readStaticRole(engine.storage, name);
    if (role) out.push([name, role]);
  }
  return out;
}

/** Seconds to expiry of each role's served secret, and how many roles fail; read from storage at each scrape. */
export function registerStaticGauges(engine: CloudEngine, metrics: MountMetrics): void {
  const read = shared(() => allRoles(engine));
  metrics.gauge(CLOUD_STATIC_EXPIRY, async () => (await read()).flatMap(([name, r]) => {
    const secret = servedSecret(r, engine.clock.now());
    return secret ? [{ labels: { role: name }, value: Math.floor((secret.end - engine.clock.now()) / 1000) }] : [];
  }));
  metrics.gauge(CLOUD_STATIC_FAILING, async () => [{ labels: {}, value: (await read()).filter(([, r]) => r.failure).length }]);
}

export function staticRotatePaths(engine: CloudEngine, rotation: StaticRotation): PathDefinition[] {
  return [
    definePath({
      pattern: `rotate-role/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Rotate a static role\'s client secret now; the previous one keeps working for the grace period.',
      fields: {
        name: field.string('Name of the static role.'),
        force: field.bool('Rotate even while the previous manual rotation\'s grace period runs (its secret is still removed at its time).', { default: false }),
      },
      operations: { update: async (req) => rotation.manual(roleName(req), req.data.force ?? false) },
    }),
    definePath({
      pattern: 'rotation-failures/?',
      description: 'List the static roles whose last rotation step failed, with since when, how many attempts and the last error.',
      operations: {
        list: async () => {
          const failing = (await allRoles(engine)).filter(([, r]) => r.failure).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
          return {
            data: {
              keys: failing.map(([name]) => name),
              key_info: Object.fromEntries(failing.map(([name, r]) => [name, {
                kind: 'rotation', since: new Date(r.failure!.since).toISOString(), attempts: r.failure!.attempts, last_error: r.failure!.message,
              }])),
            },
          };
        },
      },
    }),
  ];
}
