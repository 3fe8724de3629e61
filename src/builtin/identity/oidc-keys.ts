import { z } from 'zod';
import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { SIGNING_ALGORITHMS } from '../../core/oidc/keys.ts';
import type { PluginIdentityIssuer } from '../../core/oidc/issuer.ts';

const NAME = '(?<name>\\w(?:[\\w.-]*\\w)?)';

/** Mounts whose plugin identity tokens a key signs; such a key cannot be deleted. */
function mountsUsingKey(core: Core, name: string): string[] {
  return core.mounts.all().filter((e) => e.config.identity_token_key === name).map((e) => e.path);
}

export function oidcKeyPaths(issuer: PluginIdentityIssuer, core: Core): PathDefinition[] {
  return [
    definePath({
      pattern: 'oidc/key/?',
      description: 'List the named OIDC signing keys.',
      operations: { list: async () => ({ data: { keys: await issuer.listKeys() } }) },
    }),
    definePath({
      pattern: `oidc/key/${NAME}/rotate`,
      description: 'Rotate a named key now: the next key starts signing, the old one stays published for its verification TTL.',
      fields: { verification_ttl: field.duration('How long the outgoing public key stays published (default: the key\'s verification_ttl).') },
      operations: {
        update: async (req) => {
          if (req.has('verification_ttl') && !(req.data.verification_ttl! > 0)) throw new BadRequestError('invalid value for field "verification_ttl": must be positive');
          await issuer.rotateKey(req.params.name, req.data.verification_ttl);
        },
      },
    }),
    definePath({
      pattern: `oidc/key/${NAME}`,
      description: 'Create, tune, read or delete a named OIDC signing key (a mount picks one with its identity_token_key tune option).',
      fields: {
        algorithm: field.custom(z.enum(SIGNING_ALGORITHMS, { error: `expected one of ${SIGNING_ALGORITHMS.join(', ')}` }), 'Signing algorithm (default RS256).'),
        rotation_period: field.duration('How often the signing key rotates (default 24h, at least 1m).'),
        verification_ttl: field.duration('How long a rotated-out public key stays published; also caps token TTLs (default 24h, at most 10x rotation_period).'),
      },
      existenceCheck: async (req) => (await issuer.readKey(req.params.name)) !== undefined,
      operations: {
        read: async (req) => {
          const key = await issuer.readKey(req.params.name);
          if (!key) return;
          return { data: { algorithm: key.algorithm, rotation_period: key.rotation_period, verification_ttl: key.verification_ttl } };
        },
        create: async (req) => {
          await issuer.writeKey(req.params.name, {
            algorithm: req.data.algorithm, rotationPeriod: req.data.rotation_period, verificationTtl: req.data.verification_ttl,
          });
        },
        delete: async (req) => {
          const users = mountsUsingKey(core, req.params.name);
          if (users.length) throw new BadRequestError(`unable to delete key "${req.params.name}" because it is currently referenced by these mounts: ${users.join(', ')}`);
          await issuer.deleteKey(req.params.name);
        },
      },
    }),
  ];
}
