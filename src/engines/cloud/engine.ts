import type { Logger } from 'pino';
import type { Clock } from '../../core/clock.ts';
import { BadRequestError } from '../../core/errors.ts';
import type { SystemView } from '../../core/framework.ts';
import { KeyedLock } from '../../core/keyed-lock.ts';
import type { StorageView } from '../../core/storage/view.ts';
import type { AzureClientConfig, AzureClientFactory, AzureClients } from '../../providers/azure/clients.ts';
import { effectiveConfig, readConfig, type CloudConfig } from './config.ts';
import { CreationWal } from './wal.ts';

/** What every path file of the engine shares: config, clients, the creation WAL and locks. */
export interface Connection {
  /** The config as used: stored values with CLOUD_* environment overrides applied. */
  config: CloudConfig;
  clients: AzureClients;
}

export interface EngineDeps {
  storage: StorageView;
  clock: Clock;
  logger: Logger;
  system: SystemView;
  mountAccessor: string;
  env: NodeJS.ProcessEnv;
  factory: AzureClientFactory;
}

export class CloudEngine {
  readonly storage: StorageView;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly system: SystemView;
  readonly env: NodeJS.ProcessEnv;
  readonly wal: CreationWal;
  /** Per role name; "config" serialises config writes with rotate-root. */
  readonly locks = new KeyedLock();
  readonly #factory: AzureClientFactory;
  readonly #mountAccessor: string;

  constructor(d: EngineDeps) {
    this.storage = d.storage;
    this.clock = d.clock;
    this.logger = d.logger;
    this.system = d.system;
    this.env = d.env;
    this.#factory = d.factory;
    this.#mountAccessor = d.mountAccessor;
    this.wal = new CreationWal({
      storage: d.storage, clock: d.clock, logger: d.logger,
      clients: async () => (await this.#tryConnect())?.clients,
      leaseExists: (id) => d.system.leaseExists(id),
      system: d.system,
    });
  }

  /** 400 when the engine has no config yet: nothing can be resolved or created without it. */
  async connect(): Promise<Connection> {
    const connection = await this.#tryConnect();
    if (!connection) throw new BadRequestError('the cloud engine is not configured: write config first');
    return connection;
  }

  /** Clients for an explicit config (rotate-root checks a new secret before switching to it). */
  clientsFor(config: CloudConfig): AzureClients {
    return this.#factory.get(this.#clientConfig(config));
  }

  invalidate(): void {
    this.#factory.invalidate();
  }

  async #tryConnect(): Promise<Connection | undefined> {
    const stored = await readConfig(this.storage);
    if (!stored) return undefined;
    const config = effectiveConfig(stored, this.env);
    return { config, clients: this.clientsFor(config) };
  }

  #clientConfig(c: CloudConfig): AzureClientConfig {
    const base: AzureClientConfig = {
      tenantId: c.tenant_id, subscriptionId: c.subscription_id, clientId: c.client_id || undefined,
      clientSecret: c.client_secret || undefined, environment: c.environment,
    };
    if (c.client_secret || !c.identity_token_audience) return base;
    // Workload identity federation: the core mints a plugin identity token whenever the SDK needs one.
    const audience = c.identity_token_audience;
    const ttl = c.identity_token_ttl;
    return {
      ...base,
      getAssertion: async () => (await this.system.generateIdentityToken(audience, ttl)).token,
      assertionKey: `${this.#mountAccessor}|${audience}|${ttl}`,
    };
  }
}
