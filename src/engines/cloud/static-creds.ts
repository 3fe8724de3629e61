/**
 * `static-creds/:name`: the client secret a static role serves (no lease: the role owns it), and
 * `static-creds/:name/token`: an access token for it from the directory's token endpoint (no lease either).
 */
import { BadRequestError, NotFoundError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, lowerName, type PathDefinition } from '../../core/framework.ts';
import { createCredential } from '../../providers/azure/credentials.ts';
import { toProviderError } from '../../providers/azure/errors.ts';
import { withRetry } from '../../providers/azure/retry.ts';
import type { CloudEngine, Connection } from './engine.ts';
import { ROLE_NAME, roleName } from './roles.ts';
import { refuseOwnApp } from './static-rotation.ts';
import { readStaticRole, servedSecret, type StaticRole, type StaticSecret } from './static-store.ts';

/** A scope list: space-separated tokens of printable characters, no quotes or control characters. */
const SCOPE = /^[\x21\x23-\x26\x28-\x7e]+(?: [\x21\x23-\x26\x28-\x7e]+)*$/;
const SCOPE_MAX = 1024;
/** A secret this young may not have reached every replica of the token endpoint yet (AADSTS7000215 meanwhile). */
const PROPAGATION_MS = 5 * 60_000;
const TOKEN_DEADLINE_MS = 30_000;

/** The role and the secret it serves now; 400 while it has none (deferred, or imported without its value). */
async function served(engine: CloudEngine, name: string): Promise<{ conn: Connection; role: StaticRole; secret: StaticSecret }> {
  const role = await readStaticRole(engine.storage, name);
  if (!role) throw new NotFoundError(`static role '${name}' does not exist`);
  const conn = await engine.connect();
  refuseOwnApp(conn, name, role);
  const secret = servedSecret(role, engine.clock.now());
  if (!secret?.client_secret) {
    throw new BadRequestError(`static role '${name}' has no client secret to serve yet: import one with its client_secret, or rotate-role`);
  }
  return { conn, role, secret };
}

function requestMetadata(pairs: string[]): Record<string, string> {
  return Object.fromEntries(pairs.map((pair) => {
    const eq = pair.indexOf('=');
    if (eq <= 0) throw new BadRequestError('invalid value for field "metadata": expected key=value pairs');
    return [pair.slice(0, eq), pair.slice(eq + 1)];
  }));
}

export function staticCredsPaths(engine: CloudEngine): PathDefinition[] {
  return [
    definePath({
      pattern: `static-creds/(?<name>${ROLE_NAME})/token`,
      canonical: { name: lowerName },
      description: 'An access token for the static role\'s application, from the directory\'s token endpoint with the current client secret. No lease.',
      fields: { name: field.string('Name of the static role.'), scope: field.string('Scope of the token, e.g. https://graph.microsoft.com/.default.', { required: true, maxLength: SCOPE_MAX }) },
      operations: {
        update: async (req) => {
          const scope = (req.data.scope ?? '').trim();
          if (!SCOPE.test(scope)) throw new BadRequestError('invalid value for field "scope": expected space-separated scopes of printable characters');
          const { conn, role, secret } = await served(engine, roleName(req));
          const { credential } = createCredential({
            tenantId: conn.config.tenant_id, clientId: role.application_id, clientSecret: secret.client_secret, environment: conn.clients.environment,
          });
          try {
            const fresh = engine.clock.now() - secret.start < PROPAGATION_MS;
            const token = await withRetry(() => credential.getToken(scope.split(' ')), {
              deadlineMs: TOKEN_DEADLINE_MS, notReplicated: fresh ? (i) => i.code === 'AADSTS7000215' : undefined,
            });
            if (!token) throw new Error('the token endpoint returned no token');
            return { data: { access_token: token.token, token_type: 'Bearer', expires_on: new Date(token.expiresOnTimestamp).toISOString() } };
          } catch (err) {
            throw toProviderError(err, 'token for the static role', [secret.client_secret]);
          }
        },
      },
    }),
    definePath({
      pattern: `static-creds/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'The client secret a static role serves now (the staged one once it has started). No lease: the role owns the secret.',
      fields: {
        name: field.string('Name of the static role.'),
        metadata: field.stringList('Request metadata echoed back, as key=value query parameters (repeatable); the role\'s metadata wins on equal keys.', { maxItems: 64, maxItemLength: 1024 }),
      },
      operations: {
        read: async (req) => {
          const { role, secret } = await served(engine, roleName(req));
          return {
            data: {
              client_id: role.application_id, client_secret: secret.client_secret, secret_id: secret.key_id,
              expiration: new Date(secret.end).toISOString(), metadata: { ...requestMetadata(req.data.metadata ?? []), ...role.metadata },
            },
          };
        },
      },
    }),
  ];
}
