import { definePath, type BackendResponse, type PathDefinition } from '../../core/framework.ts';
import type { PluginIdentityIssuer } from '../../core/oidc/issuer.ts';

/** Vault's bound on how long a verifier may cache the issuer's documents. */
const MAX_CACHE_SECONDS = 24 * 3600;

const rawJson = (body: unknown, maxAgeSeconds: number | undefined): BackendResponse => ({
  raw: { status: 200, headers: maxAgeSeconds === undefined ? {} : { 'cache-control': `max-age=${maxAgeSeconds}` }, body: JSON.stringify(body) },
});

/**
 * What a cloud directory fetches to trust plugin identity tokens: public, unauthenticated, no envelope. Both documents
 * may be cached until the keys next change (a rotation, or a retired key leaving), at most a day; keys with no key yet
 * are not cached at all (the first token creates one), and every other answer stays `no-store`.
 */
export function oidcDiscoveryPaths(issuer: PluginIdentityIssuer): PathDefinition[] {
  const cacheFor = (untilKeysChange: number | undefined) => Math.min(untilKeysChange ?? MAX_CACHE_SECONDS, MAX_CACHE_SECONDS);
  return [
    definePath({
      pattern: 'oidc/plugins/\\.well-known/openid-configuration',
      rawResponse: ['application/json'],
      description: 'OpenID discovery document of the plugin identity token issuer, cacheable until the next key change (at most a day).',
      unauthenticated: true,
      operations: { read: async () => rawJson(await issuer.discovery(), cacheFor((await issuer.jwks()).maxAgeSeconds)) },
    }),
    definePath({
      pattern: 'oidc/plugins/\\.well-known/keys',
      rawResponse: ['application/json'],
      description: 'Public keys (JWKS) that verify plugin identity tokens, cacheable until the next key change (at most a day).',
      unauthenticated: true,
      operations: {
        read: async () => {
          const { keys, maxAgeSeconds } = await issuer.jwks();
          return rawJson({ keys }, maxAgeSeconds === undefined ? undefined : cacheFor(maxAgeSeconds));
        },
      },
    }),
  ];
}
