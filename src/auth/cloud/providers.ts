/**
 * The mount's parsed config, verifier and ARM client, kept while the config is unchanged, so logins
 * reuse the cached discovery document, keys and the credential's access token (Vault rebuilds the
 * credential on every login). Config writes and deletes call reset(), here and (through the backend's
 * `cached`) on every other node; a config read that started before a reset is not cached.
 */
import { createHash } from 'node:crypto';
import type { Clock } from '../../core/clock.ts';
import type { SystemView } from '../../core/framework.ts';
import { SdkComputeClient, type ComputeClient } from '../../providers/azure/compute.ts';
import { createCredential } from '../../providers/azure/credentials.ts';
import { resolveEnvironment, type AzureEnvironment, type ResolveEnvironmentOptions } from '../../providers/azure/environments.ts';
import { forgetSecret } from '../../providers/azure/logging.ts';
import type { ProviderObserver } from '../../providers/azure/observer.ts';
import type { RetryOptions } from '../../providers/azure/retry.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { readConfig, type CloudAuthConfig } from './config.ts';
import { JwtVerifier } from './jwt-verifier.ts';

/** Bound on all ARM attempts of one login, so a throttled ARM cannot hold a login open for minutes. */
const LOGIN_ARM_DEADLINE_MS = 30_000;

export interface ProviderDeps {
  clock: Clock;
  system: SystemView;
  envOptions: ResolveEnvironmentOptions;
  observer?: ProviderObserver;
}

interface Built {
  key: string;
  config: CloudAuthConfig;
  verifier: JwtVerifier;
  compute?: ComputeClient;
  secret: string;
}

export class CloudAuthProviders {
  readonly #deps: ProviderDeps;
  #built: Built | undefined;
  #config: CloudAuthConfig | undefined;
  #generation = 0;

  constructor(deps: ProviderDeps) {
    this.#deps = deps;
  }

  async config(storage: StorageView): Promise<CloudAuthConfig | undefined> {
    if (this.#config) return this.#config;
    const generation = this.#generation;
    const config = await readConfig(storage);
    if (generation === this.#generation) this.#config = config;
    return config;
  }

  verifier(config: CloudAuthConfig): JwtVerifier {
    return this.#for(config).verifier;
  }

  compute(config: CloudAuthConfig): ComputeClient {
    const built = this.#for(config);
    built.compute ??= this.#buildCompute(config);
    return built.compute;
  }

  reset(): void {
    this.#generation++;
    this.#config = undefined;
    this.#forgetBuilt();
  }

  #forgetBuilt(): void {
    forgetSecret(this.#built?.secret);
    this.#built = undefined;
  }

  #for(config: CloudAuthConfig): Built {
    if (this.#built?.config === config) return this.#built;
    const key = createHash('sha256').update(JSON.stringify(config)).digest('hex');
    if (this.#built?.key === key) return this.#built;
    this.#forgetBuilt();
    const environment = this.#environment(config);
    const verifier = new JwtVerifier({
      discoveryUrl: `${environment.activeDirectoryEndpoint}/${encodeURIComponent(config.tenant_id)}/.well-known/openid-configuration`,
      tenantId: config.tenant_id,
      audience: config.resource,
      clock: this.#deps.clock,
    });
    this.#built = { key, config, verifier, secret: config.client_secret };
    return this.#built;
  }

  #environment(config: CloudAuthConfig): AzureEnvironment {
    return resolveEnvironment(config.environment, this.#deps.envOptions);
  }

  #buildCompute(config: CloudAuthConfig): ComputeClient {
    const environment = this.#environment(config);
    const retry: RetryOptions = {
      maxAttempts: config.max_retries + 1,
      baseDelayMs: config.retry_delay * 1000,
      maxDelayMs: config.max_retry_delay * 1000,
      deadlineMs: LOGIN_ARM_DEADLINE_MS,
    };
    const { system } = this.#deps;
    const getAssertion = config.identity_token_audience
      ? async () => (await system.generateIdentityToken(config.identity_token_audience, config.identity_token_ttl)).token
      : undefined;
    const { credential } = createCredential({
      tenantId: config.tenant_id, clientId: config.client_id || undefined, clientSecret: config.client_secret || undefined, getAssertion, environment,
    });
    return new SdkComputeClient({ environment, credential, retry, secrets: config.client_secret ? [config.client_secret] : [], observer: this.#deps.observer });
  }
}
