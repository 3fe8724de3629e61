import { decodeUnsealKey, UnsealError } from '../../core/barrier.ts';
import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { VERSION } from '../../core/version.ts';
import { CLUSTER_NAME, type ClusterIdentity } from './status.ts';

/** Vault's storage_type names for the stores Strongroom has; a store of another class reports its class. */
const STORAGE_TYPES: Record<string, string> = { MemoryStorage: 'inmem', SqliteStorage: 'sqlite', PostgresStorage: 'postgresql' };

/**
 * Vault's seal status. Strongroom's single unseal key works as a Shamir seal of one share with a threshold of one: the
 * key submitted to sys/unseal unseals at once, so no progress is ever kept. The cluster's name and id are shown only
 * while unsealed, as Vault does.
 */
export function sealStatus(core: Core, cluster: ClusterIdentity): Record<string, unknown> {
  const storage = core.options.storage.constructor.name;
  return {
    type: 'shamir', initialized: true, sealed: core.sealed, t: 1, n: 1, progress: 0, nonce: '',
    version: VERSION, build_date: '', migration: false,
    ...(core.sealed ? {} : { cluster_name: CLUSTER_NAME, cluster_id: cluster.id }),
    recovery_seal: false, storage_type: STORAGE_TYPES[storage] ?? storage.toLowerCase(),
  };
}

/** The key a request carries, decoded; a 400 naming the field otherwise (the value itself is never echoed). */
export function requireUnsealKey(text: string | undefined): Buffer {
  if (!text) throw new BadRequestError('missing required field "key"');
  const key = decodeUnsealKey(text);
  if (!key) throw new BadRequestError('invalid value for field "key": expected the 32-byte unseal key, base64- or hex-encoded');
  return key;
}

export function sealPaths(core: Core, cluster: ClusterIdentity): PathDefinition[] {
  const raw = (body: unknown) => ({ raw: { status: 200, body: JSON.stringify(body) } });
  return [
    definePath({
      pattern: 'seal-status',
      description: 'Seal status (answered sealed or not, without a token).',
      unauthenticated: true,
      rawResponse: ['application/json'],
      operations: { read: async () => raw(sealStatus(core, cluster)) },
    }),
    definePath({
      pattern: 'seal',
      description: 'Seal this node (sudo): it refuses every request but the seal status and sys/unseal until unsealed with the unseal key.',
      operations: { update: async () => void (await core.seal()) },
    }),
    definePath({
      pattern: 'unseal',
      description: 'Unseal this node with the unseal key (one key, threshold one); `reset` discards progress, of which there is never any.',
      unauthenticated: true,
      rawResponse: ['application/json'],
      fields: {
        key: field.string('The unseal key, base64- or hex-encoded.', { maxLength: 256 }),
        reset: field.bool('Discard the keys submitted so far.'),
        migrate: field.bool('Seal migration, which Strongroom does not have: must be false.'),
      },
      operations: {
        update: async (req) => {
          if (req.data.migrate) throw new BadRequestError('invalid value for field "migrate": Strongroom has no seal migration');
          // As in Vault, a reset wins over a key sent along with it.
          if (req.data.reset) return raw(sealStatus(core, cluster));
          const key = requireUnsealKey(req.data.key);
          try {
            await core.unseal(key);
          } catch (err) {
            if (err instanceof UnsealError) throw new BadRequestError('invalid value for field "key": the key does not unseal this store');
            throw err;
          }
          return raw(sealStatus(core, cluster));
        },
      },
    }),
  ];
}
