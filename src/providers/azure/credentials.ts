/**
 * How both cloud mounts authenticate to Azure, in Vault's order: a client secret; else a client
 * assertion (workload identity federation, fed by the caller's getAssertion); else the host's managed
 * identity. Non-public clouds need the environment's authority host and no instance discovery
 * (MSAL would otherwise ask login.microsoftonline.com which hosts are valid).
 */
import { ClientAssertionCredential, ClientSecretCredential, ManagedIdentityCredential, type TokenCredential } from '@azure/identity';
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
      if (!cfg.clientId) throw new AzureProviderError('input', `client_id is required with ${kind === 'client-secret' ? 'client_secret' : 'identity_token_audience'}`);
      if (kind === 'client-secret') {
        registerSecret(cfg.clientSecret);
        return { kind, credential: new ClientSecretCredential(cfg.tenantId, cfg.clientId, cfg.clientSecret!, common) };
      }
      return { kind, credential: new ClientAssertionCredential(cfg.tenantId, cfg.clientId, cfg.getAssertion!, common) };
    }
    case 'managed-identity':
      // As in Vault, client_id is not passed: the host's system-assigned identity is used.
      return { kind, credential: new ManagedIdentityCredential({ retryOptions: { maxRetries: 0 } }) };
  }
}
