import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import type { PluginIdentityIssuer } from '../../core/oidc/issuer.ts';

export function oidcConfigPaths(issuer: PluginIdentityIssuer): PathDefinition[] {
  return [
    definePath({
      pattern: 'oidc/config',
      description: 'Issuer of plugin identity tokens: scheme, host and optional port the cloud directory can reach.',
      fields: {
        issuer: field.string('Scheme, host and optional port (e.g. https://strongroom.example.com:8200); empty uses the server\'s API address.'),
      },
      operations: {
        read: async () => ({ data: { issuer: await issuer.configuredIssuer() } }),
        update: async (req) => {
          if (req.has('issuer')) await issuer.setIssuer(req.data.issuer ?? '');
        },
      },
    }),
  ];
}
