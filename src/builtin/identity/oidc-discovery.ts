import { definePath, type BackendResponse, type PathDefinition } from '../../core/framework.ts';
import type { PluginIdentityIssuer } from '../../core/oidc/issuer.ts';

/** Vault serves the discovery document with a fixed hour of caching. */
const DISCOVERY_MAX_AGE = 3600;

const rawJson = (body: unknown, maxAgeSeconds: number | undefined): BackendResponse => ({
  raw: { status: 200, headers: maxAgeSeconds === undefined ? {} : { 'cache-control': `max-age=${maxAgeSeconds}` }, body: JSON.stringify(body) },
});

/** What a cloud directory fetches to trust plugin identity tokens: public, unauthenticated, no envelope. */
export function oidcDiscoveryPaths(issuer: PluginIdentityIssuer): PathDefinition[] {
  return [
    definePath({
      pattern: 'oidc/plugins/\\.well-known/openid-configuration',
      description: 'OpenID discovery document of the plugin identity token issuer.',
      unauthenticated: true,
      operations: { read: async () => rawJson(await issuer.discovery(), DISCOVERY_MAX_AGE) },
    }),
    definePath({
      pattern: 'oidc/plugins/\\.well-known/keys',
      description: 'Public keys (JWKS) that verify plugin identity tokens, cacheable until the next key change.',
      unauthenticated: true,
      operations: {
        read: async () => {
          const { keys, maxAgeSeconds } = await issuer.jwks();
          return rawJson({ keys }, maxAgeSeconds);
        },
      },
    }),
  ];
}
