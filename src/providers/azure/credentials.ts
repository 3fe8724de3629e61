/**
 * How both cloud mounts authenticate to Azure, in Vault's order: a client secret; else a client
 * assertion (workload identity federation, fed by the caller's getAssertion); else the host's managed
 * identity. Non-public clouds need the environment's authority host and no instance discovery
 * (MSAL would otherwise ask login.microsoftonline.com which hosts are valid).
 */
import type { AccessToken, GetTokenOptions, TokenCredential } from '@azure/identity';
import type { AzureEnvironment } from './environments.ts';
import { AzureProviderError } from './errors.ts';
import { registerSecret } from './logging.ts';

export interface CredentialConfig {
  tenantId: string;
  clientId?: string;
  clientSecret?: string;
  /** Issue 8: returns a fresh plugin identity token each time the SDK needs an access token. */
  getAssertion?: () => Promise<string>;
  environment: AzureEnvironment;
}

export type CredentialKind = 'client-secret' | 'client-assertion' | 'managed-identity';

export interface SelectedCredential {
  kind: CredentialKind;
  credential: TokenCredential;
}

export function selectCredentialKind(cfg: Pick<CredentialConfig, 'clientId' | 'clientSecret' | 'getAssertion'>): CredentialKind {
  if (cfg.clientSecret) return 'client-secret';
  if (cfg.getAssertion) return 'client-assertion';
  return 'managed-identity';
}

const TENANT = /^[0-9a-zA-Z-.]+$/;

type BuildCredential = (identity: typeof import('@azure/identity')) => TokenCredential;

/**
 * @azure/identity (with the HTTP pipeline under it, ~0.25 s of CPU to load) is imported at the first token, not at
 * start: a server whose cloud mounts are not used never loads it. The config is still checked when the credential
 * is made, so a bad config write is refused at once as before.
 */
class LazyCredential implements TokenCredential {
  readonly #build: BuildCredential;
  #credential?: Promise<TokenCredential>;

  constructor(build: BuildCredential) {
    this.#build = build;
  }

  async getToken(scopes: string | string[], options?: GetTokenOptions): Promise<AccessToken | null> {
    this.#credential ??= import('@azure/identity').then(this.#build);
    return (await this.#credential).getToken(scopes, options);
  }
}

export function createCredential(cfg: CredentialConfig): SelectedCredential {
  const kind = selectCredentialKind(cfg);
  const common = {
    authorityHost: cfg.environment.activeDirectoryEndpoint,
    disableInstanceDiscovery: true,
    // Single retry layer: retry.ts decides, within the request deadline.
    retryOptions: { maxRetries: 0 },
  };
  switch (kind) {
    case 'client-secret':
    case 'client-assertion': {
      if (!cfg.tenantId) throw new AzureProviderError('input', 'tenant_id is required');
      // The SDK's own check, which it makes when the credential is built: that is now at the first token, and a
      // config write must still be refused at once.
      if (!TENANT.test(cfg.tenantId)) throw new AzureProviderError('input', 'tenant_id may hold only letters, digits, - and .');
      if (!cfg.clientId) throw new AzureProviderError('input', `client_id is required with ${kind === 'client-secret' ? 'client_secret' : 'identity_token_audience'}`);
      if (kind === 'client-secret') {
        registerSecret(cfg.clientSecret);
        return { kind, credential: new LazyCredential((id) => new id.ClientSecretCredential(cfg.tenantId, cfg.clientId!, cfg.clientSecret!, common)) };
      }
      return { kind, credential: new LazyCredential((id) => new id.ClientAssertionCredential(cfg.tenantId, cfg.clientId!, cfg.getAssertion!, common)) };
    }
    case 'managed-identity':
      // As in Vault, client_id is not passed: the host's system-assigned identity is used.
      return { kind, credential: new LazyCredential((id) => new id.ManagedIdentityCredential({ retryOptions: { maxRetries: 0 } })) };
  }
}
