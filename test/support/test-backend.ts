import { BadRequestError } from '../../src/core/errors.ts';
import { field } from '../../src/core/fields.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';

/**
 * A small engine for core tests: stored objects (data/<key>) and leased secrets (creds/<name>) whose
 * revocation is recorded per mount and can be made to fail, so lease retry/irrevocable paths are testable.
 */
export interface TestBackendProbe {
  revoked: string[];
  failRevocations: boolean;
  /** Incremented by the backend's periodic job (every minute). */
  ticks: number;
  /** Whether the lease of the last `early/` request was stored when its handler went on to "create" the secret. */
  leaseStoredFirst: boolean;
  /** When set, every revocation waits for it (holds a revocation open so a test can act during it). */
  revokeGate?: Promise<void>;
  /** Revocations currently waiting at the gate. */
  revoking: number;
}

export function testBackend(probes: Map<string, TestBackendProbe>): BackendFactory {
  return (ctx) => {
    const probe: TestBackendProbe = { revoked: [], failRevocations: false, ticks: 0, leaseStoredFirst: false, revoking: 0 };
    probes.set(ctx.mount.path, probe);
    return {
      periodic: { intervalMs: 60_000, run: async () => void probe.ticks++ },
      paths: [
        definePath({
          pattern: 'data/(?<prefix>(?:.+/)?)',
          description: 'List stored objects.',
          operations: { list: async (req) => ({ data: { keys: await ctx.storage.list(`data/${req.params.prefix ?? ''}`) } }) },
        }),
        definePath({
          pattern: 'data/(?<key>.+)',
          description: 'A stored object.',
          fields: { value: field.string('Any value.'), count: field.int('A number.') },
          existenceCheck: async (req) => (await ctx.storage.get(`data/${req.params.key}`)) !== undefined,
          operations: {
            read: async (req) => {
              const v = await ctx.storage.getJson<Record<string, unknown>>(`data/${req.params.key}`);
              return v ? { data: v } : undefined;
            },
            create: async (req) => ctx.storage.putJson(`data/${req.params.key}`, { value: req.data.value, count: req.data.count }),
            update: async (req) => ctx.storage.putJson(`data/${req.params.key}`, { value: req.data.value, count: req.data.count }),
            delete: async (req) => ctx.storage.delete(`data/${req.params.key}`),
          },
        }),
        definePath({
          pattern: 'creds/(?<name>[^/]+)',
          description: 'A leased secret.',
          fields: { ttl: field.duration('Requested TTL.'), max_ttl: field.duration('Engine max TTL.') },
          operations: {
            read: async (req) => ({
              data: { name: req.params.name },
              secret: { type: 'test_secret', ttl: req.data.ttl ?? 0, maxTtl: req.data.max_ttl ?? 0, internal: { name: req.params.name } },
            }),
          },
        }),
        definePath({
          pattern: 'early/(?<name>[^/]+)',
          description: 'A leased secret whose lease is stored before it is made; `fail` makes the making fail.',
          fields: { fail: field.bool('Fail after storing the lease.') },
          operations: {
            read: async (req) => {
              const secret = { type: 'test_secret', ttl: 0, internal: { name: req.params.name } };
              await req.registerLease(secret);
              probe.leaseStoredFirst = await ctx.system.leaseExists(req.leaseId);
              if (req.data.fail) throw new BadRequestError('making the secret failed');
              return { data: { name: req.params.name }, secret };
            },
          },
        }),
      ],
      secrets: [
        {
          type: 'test_secret',
          revoke: async (lease) => {
            if (probe.revokeGate) {
              probe.revoking++;
              await probe.revokeGate.finally(() => probe.revoking--);
            }
            if (probe.failRevocations) throw new Error('the test engine was told to fail');
            probe.revoked.push(String(lease.internal.name));
          },
        },
      ],
    };
  };
}
