/** The directory client every part of the engine shares, rebuilt only when the connection settings change. */
import type { StorageView } from '../../core/storage/view.ts';
import type { LdapClient, LdapConnectionConfig } from '../../providers/ldap/client.ts';
import { LdapProviderError } from '../../providers/ldap/errors.ts';
import type { AccountIdentity } from './accounts.ts';
import { CONFIG_KEY, ROOT_WAL_KEY, bindFallbacks, configuredBindAccount, missingConfigError, storedConfigSchema, toConnectionConfig, walPassword, type LdapConfig } from './config-store.ts';

/** What the engine works with: the config (shared: never mutate it), a client for it, and who it binds as. */
export interface LdapConnection {
  config: Readonly<LdapConfig>;
  client: LdapClient;
  /**
   * The bind account by every name known for it, for refuseBindAccount. A UPN bind's entry is looked up
   * (as rotate-root finds it, under userdn) once per client; when it is not there, the UPN is all that is known.
   */
  bindAccount: () => Promise<AccountIdentity>;
}

function bindAccountOf(config: LdapConfig, client: LdapClient): () => Promise<AccountIdentity> {
  const known = configuredBindAccount(config);
  if (!config.upndomain) {
    const same = Promise.resolve(known);
    return () => same;
  }
  let found: Promise<AccountIdentity> | undefined;
  return () => found ??= client.findBindEntry().then((entry) => ({ ...known, dn: entry.dn }), (err: unknown) => {
    if (err instanceof LdapProviderError && err.ldapCode === 32) return known;
    // Anything else (the directory unreachable) is asked again next time.
    found = undefined;
    throw err;
  });
}

/** What LdapConnections derived from one pair of stored config and root-WAL bytes. */
interface ParsedConnection extends LdapConnection {
  configRaw: Buffer;
  walRaw: Buffer | undefined;
  key: string;
}

const sameBytes = (a: Buffer | undefined, b: Buffer | undefined): boolean => (a === undefined || b === undefined ? a === b : a.equals(b));

/**
 * One directory client per distinct connection config, shared by all parts. The config is read from
 * storage on every call (right when several servers share a database) but parsed again only when its
 * bytes changed; the client, which holds a bound connection, is rebuilt only when the effective
 * connection settings change.
 */
export class LdapConnections {
  readonly #storage: StorageView;
  readonly #create: (config: LdapConnectionConfig) => LdapClient;
  #cached: ParsedConnection | undefined;

  constructor(storage: StorageView, create: (config: LdapConnectionConfig) => LdapClient) {
    this.#storage = storage;
    this.#create = create;
  }

  /** The current config and a client for it; 400 when the engine is not configured. */
  async get(): Promise<LdapConnection> {
    const configRaw = await this.#storage.get(CONFIG_KEY);
    if (!configRaw) throw missingConfigError();
    const walRaw = await this.#storage.get(ROOT_WAL_KEY);
    const cached = this.#cached;
    // Every credential request and rotation passes here: same bytes, same answer.
    if (cached && sameBytes(cached.configRaw, configRaw) && sameBytes(cached.walRaw, walRaw)) return cached;
    const config = Object.freeze(storedConfigSchema.parse(JSON.parse(configRaw.toString('utf8'))));
    const connection = toConnectionConfig(config, bindFallbacks(config, walPassword(walRaw)));
    const key = JSON.stringify(connection);
    // The key holds everything that names the bind account, so a kept client keeps its bind account too.
    const kept = cached?.key === key ? cached : undefined;
    const client = kept?.client ?? this.#create(connection);
    if (!kept && cached) {
      // Operations still running on the old client finish on their own connection; close it afterwards.
      const previous = cached.client;
      setTimeout(() => void previous.close().catch(() => undefined), 5_000).unref();
    }
    const bindAccount = kept?.bindAccount ?? bindAccountOf(config, client);
    this.#cached = { configRaw, walRaw, config, key, client, bindAccount };
    return this.#cached;
  }

  async close(): Promise<void> {
    const client = this.#cached?.client;
    this.#cached = undefined;
    await client?.close().catch(() => undefined);
  }
}
