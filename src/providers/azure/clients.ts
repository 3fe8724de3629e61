/**
 * Builds the Azure clients for a mount's effective config and caches them. The cache key hashes
 * every field, secret included, so a config write (new secret, tenant, environment, even a changed
 * custom environment file) yields fresh clients while an unchanged config keeps its token cache.
 */
import { createHash } from 'node:crypto';
import type { TokenCredential } from '@azure/identity';
import { SdkRoleClient, type RoleClient } from './arm-authorization.ts';
import { createCredential, type CredentialKind } from './credentials.ts';
import { resolveEnvironment, type AzureEnvironment, type ResolveEnvironmentOptions } from './environments.ts';
import { SdkGraphClient, type GraphClient } from './graph.ts';
import { configureAzureLogging, forgetSecret, type LogSink } from './logging.ts';
import type { ProviderObserver } from './observer.ts';
import type { RetryOptions } from './retry.ts';

export interface AzureClientConfig {
  tenantId: string;
  subscriptionId: string;
  clientId?: string;
  clientSecret?: string;
  /** Configured environment name; empty means the public cloud. */
  environment?: string;
  /** Issue 8: source of client assertions (plugin identity tokens). */
  getAssertion?: () => Promise<string>;
  /** Distinguishes assertion sources in the cache key (e.g. the audience and mount accessor). */
  assertionKey?: string;
}

export interface AzureClients {
  environment: AzureEnvironment;
  credentialKind: CredentialKind;
  credential: TokenCredential;
  graph: GraphClient;
  roles: RoleClient;
}

export interface AzureClientFactoryOptions extends ResolveEnvironmentOptions {
  retry?: RetryOptions;
  /** Where SDK debug lines go when CLOUD_GO_SDK_LOG_LEVEL=DEBUG (already redacted). */
  logSink?: LogSink;
  /** How many distinct configs to keep clients for (each mount usually has one). */
  maxEntries?: number;
  observer?: ProviderObserver;
}

export function configKey(config: AzureClientConfig, environment: AzureEnvironment): string {
  const material = JSON.stringify([
    config.tenantId, config.subscriptionId, config.clientId ?? '', config.clientSecret ?? '',
    config.getAssertion ? `assertion:${config.assertionKey ?? ''}` : '', environment,
  ]);
  return createHash('sha256').update(material).digest('hex');
}

export class AzureClientFactory {
  readonly #opts: AzureClientFactoryOptions;
  readonly #cache = new Map<string, { clients: AzureClients; secret?: string }>();

  constructor(opts: AzureClientFactoryOptions = {}) {
    this.#opts = opts;
  }

  /** Clients for this config: cached when the config is unchanged, rebuilt when anything differs. */
  get(config: AzureClientConfig): AzureClients {
    // Resolved every time: the custom environment file is part of what the clients depend on.
    const environment = resolveEnvironment(config.environment, this.#opts);
    const key = configKey(config, environment);
    const hit = this.#cache.get(key);
    if (hit) {
      this.#cache.delete(key);
      this.#cache.set(key, hit);
      return hit.clients;
    }
    const clients = this.#build(config, environment);
    this.#cache.set(key, { clients, secret: config.clientSecret });
    const max = this.#opts.maxEntries ?? 4;
    while (this.#cache.size > max) this.#evict(this.#cache.keys().next().value!);
    return clients;
  }

  /** Drops every cached client, e.g. after config delete. */
  invalidate(): void {
    for (const key of [...this.#cache.keys()]) this.#evict(key);
  }

  #evict(key: string): void {
    forgetSecret(this.#cache.get(key)?.secret);
    this.#cache.delete(key);
  }

  #build(config: AzureClientConfig, environment: AzureEnvironment): AzureClients {
    if (this.#opts.logSink) configureAzureLogging(this.#opts.logSink, this.#opts.env ?? process.env);
    const { kind, credential } = createCredential({
      tenantId: config.tenantId, clientId: config.clientId, clientSecret: config.clientSecret, getAssertion: config.getAssertion, environment,
    });
    const secrets = config.clientSecret ? [config.clientSecret] : [];
    return {
      environment,
      credentialKind: kind,
      credential,
      graph: new SdkGraphClient({ environment, credential, retry: this.#opts.retry, secrets, observer: this.#opts.observer }),
      roles: new SdkRoleClient({ environment, credential, subscriptionId: config.subscriptionId, retry: this.#opts.retry, secrets, observer: this.#opts.observer }),
    };
  }
}
