/**
 * `LdapClient` over ldapts 9. One bound connection is kept and shared by concurrent operations
 * (ldapts multiplexes message ids), unlike Vault which dials and binds for every operation; a
 * dropped connection is re-established, walking the URL list again.
 */
import type { ConnectionOptions, SecureVersion } from 'node:tls';
import { isIP } from 'node:net';
import { Attribute, Change, Client, type Entry } from 'ldapts';
import type { LdifAttribute, LdifModification, LdifRecord } from '../../lib/ldif/types.ts';
import type {
  AccountRef, BindCheck, LdapClient, LdapConnectionConfig, LdapEntry,
  LdifExecMode, LdifExecResult, TlsVersionName, WriteGuard,
} from './client.ts';
import { ASSERTION_CONTROL_OID, AssertionControl } from './assertion-control.ts';
import { escapeDnValue, isValidDn } from './dn.ts';
import { LdapProviderError, UnknownWriteOutcomeError, connectFailure, type NamedValue, isConnectionError, ldapResultCode, toProviderError } from './errors.ts';
import { andFilter, equalityFilter, isValidAttributeName } from './filter.ts';
import { executeLdif } from './ldif-exec.ts';
import { defaultUserAttr, passwordChanges } from './schemas.ts';

const DEFAULT_TIMEOUT_SECONDS = 90;

/**
 * The change marker a conditional password write asserts. OpenLDAP keeps entryCSN on every entry it writes (lastmod,
 * on by default) and gives it a new value, unique to the microsecond plus a counter, on every change: unlike
 * modifyTimestamp (one-second granularity) two changes never share one, and unlike a userPassword hash it is readable
 * by an account that may only write passwords. Directories without it (AD) get unconditional writes.
 */
const CHANGE_MARKER = 'entryCSN';

const TLS_VERSIONS: Record<TlsVersionName, SecureVersion> = {
  tls10: 'TLSv1', tls11: 'TLSv1.1', tls12: 'TLSv1.2', tls13: 'TLSv1.3',
};

/** The deprecated connection_timeout only ever shortens: the smaller of the two set values is used for both. */
export function effectiveTimeoutMs(config: Pick<LdapConnectionConfig, 'request_timeout' | 'connection_timeout'>): number {
  const set = [config.request_timeout, config.connection_timeout].filter((v): v is number => typeof v === 'number' && v > 0);
  return (set.length ? Math.min(...set) : DEFAULT_TIMEOUT_SECONDS) * 1000;
}

/** Splits the comma list and checks each scheme; order is preserved because it is the failover order. */
export function parseUrlList(url: string): URL[] {
  const parts = url.split(',').map((u) => u.trim()).filter(Boolean);
  if (parts.length === 0) throw new LdapProviderError('input', 'url: at least one LDAP URL must be provided');
  return parts.map((raw) => {
    let parsed: URL;
    try {
      parsed = new URL(raw);
    } catch {
      throw new LdapProviderError('input', 'invalid value for field "url": not a valid URL');
    }
    if (parsed.protocol !== 'ldap:' && parsed.protocol !== 'ldaps:') {
      throw new LdapProviderError('input', 'invalid value for field "url": invalid LDAP scheme (use ldap:// or ldaps://)');
    }
    return parsed;
  });
}

/** The identity used in the simple bind: the UPN form when upndomain is set. */
export function bindIdentity(config: Pick<LdapConnectionConfig, 'binddn' | 'upndomain'>): string {
  if (config.upndomain) return `${escapeDnValue(config.binddn)}@${config.upndomain}`;
  if (!config.binddn) throw new LdapProviderError('input', 'binddn: must provide binddn or upndomain');
  return config.binddn;
}

export function tlsOptions(config: LdapConnectionConfig, host: string): ConnectionOptions {
  const min = config.tls_min_version ? TLS_VERSIONS[config.tls_min_version] : undefined;
  const max = config.tls_max_version ? TLS_VERSIONS[config.tls_max_version] : undefined;
  return {
    host,
    // SNI must be a name; Node refuses an IP literal there.
    ...(isIP(host) ? {} : { servername: host }),
    rejectUnauthorized: config.insecure_tls !== true,
    ...(config.certificate ? { ca: [config.certificate] } : {}),
    ...(config.client_tls_cert ? { cert: config.client_tls_cert, key: config.client_tls_key } : {}),
    ...(min ? { minVersion: min } : {}),
    ...(max ? { maxVersion: max } : {}),
  };
}

function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1') || 'localhost';
}

function toEntry(e: Entry): LdapEntry {
  const attributes: Record<string, string[]> = {};
  for (const [key, raw] of Object.entries(e)) {
    if (key === 'dn') continue;
    const values = (Array.isArray(raw) ? raw : [raw]) as Array<string | Buffer>;
    // ldapts lists requested-but-absent attributes as empty arrays; absent means absent here.
    if (values.length === 0) continue;
    const name = key.toLowerCase();
    attributes[name] = [...(attributes[name] ?? []), ...values.map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : String(v)))];
  }
  return { dn: e.dn, attributes };
}

function toLdapts(change: LdifModification): Change {
  return new Change({
    operation: change.operation,
    modification: new Attribute({ type: change.attribute.name, values: change.attribute.values as string[] }),
  });
}

interface Session {
  client: Client;
  url: string;
  usedFallback: boolean;
}

export class LdaptsClient implements LdapClient {
  readonly #config: LdapConnectionConfig;
  readonly #urls: URL[];
  readonly #timeoutMs: number;
  #session: Promise<Session> | undefined;
  /** Whether the rootDSE advertises the Assertion Control; kept once read (a failed read is asked again). */
  #assertion: Promise<boolean> | undefined;

  constructor(config: LdapConnectionConfig) {
    this.#config = config;
    this.#urls = parseUrlList(config.url);
    this.#timeoutMs = effectiveTimeoutMs(config);
    if (config.userattr !== undefined && config.userattr !== '' && !isValidAttributeName(config.userattr)) {
      throw new LdapProviderError('input', 'invalid value for field "userattr": not a valid attribute name');
    }
    if (config.tls_min_version && config.tls_max_version &&
      Object.keys(TLS_VERSIONS).indexOf(config.tls_max_version) < Object.keys(TLS_VERSIONS).indexOf(config.tls_min_version)) {
      throw new LdapProviderError('input', 'tls_max_version: must be greater than or equal to tls_min_version');
    }
    if (!!config.client_tls_cert !== !!config.client_tls_key) {
      throw new LdapProviderError('input', 'client_tls_cert: both client_tls_cert and client_tls_key must be set');
    }
  }

  /**
   * What every message is scrubbed of: the passwords, and the stored bind identity by name, so a later request's
   * error (or a log line) never repeats what a config write stored (docs/security.md, class 3). The search base and
   * user attribute are never put in a message either, but are not scrubbed: every role DN under the base holds them.
   */
  get #secrets(): Array<string | NamedValue> {
    const { binddn, upndomain } = this.#config;
    return [
      this.#config.bindpass, ...(this.#config.fallback_bindpass ?? []), this.#config.client_tls_key ?? '',
      ...(upndomain ? [[bindIdentity(this.#config), 'the configured binddn@upndomain'], [`${binddn}@${upndomain}`, 'the configured binddn@upndomain']] as NamedValue[] : []),
      [binddn, 'the configured binddn'], [upndomain ?? '', 'the configured upndomain'],
    ];
  }

  /** The search base, named: the configured userdn or the directory's root. */
  get #base(): string {
    return this.#config.userdn ? 'the configured userdn' : 'the directory root';
  }

  get #userattr(): string {
    return this.#config.userattr || defaultUserAttr(this.#config.schema ?? 'openldap');
  }

  /** Connects to one URL, upgrading with StartTLS when asked; plain connections open on first use. */
  async #dial(url: URL): Promise<Client> {
    const host = hostOf(url);
    const secure = url.protocol === 'ldaps:';
    const client = new Client({
      url: `${url.protocol}//${url.host}`,
      timeout: this.#timeoutMs,
      connectTimeout: this.#timeoutMs,
      // ldapts treats any tlsOptions as "connect with TLS", so plain ldap:// must get none.
      ...(secure ? { tlsOptions: tlsOptions(this.#config, host) } : {}),
    });
    if (!secure && this.#config.starttls) await client.startTLS(tlsOptions(this.#config, host));
    return client;
  }

  /**
   * Walks the URL list in order. Only connection failures (refused, timeout, TLS handshake, socket
   * closed) move on to the next URL; an LDAP answer such as a wrong password is final.
   */
  async #connect<T>(use: (client: Client, url: string) => Promise<T>): Promise<T> {
    const failures: string[] = [];
    for (const url of this.#urls) {
      let client: Client | undefined;
      try {
        client = await this.#dial(url);
        return await use(client, url.href);
      } catch (err) {
        await client?.unbind().catch(() => undefined);
        if (!isConnectionError(err)) throw err;
        failures.push(connectFailure(`${url.protocol}//${url.host}${url.pathname}`, err, this.#secrets));
      }
    }
    throw new LdapProviderError('connection', failures.join('; '));
  }

  /** Binds with bindpass, then each fallback password; reports whether a fallback was needed. */
  async #bind(client: Client): Promise<boolean> {
    const identity = bindIdentity(this.#config);
    if (!this.#config.bindpass) throw new LdapProviderError('input', 'bindpass: unable to bind due to lack of configured password');
    const passwords = [this.#config.bindpass, ...(this.#config.fallback_bindpass ?? []).filter(Boolean)];
    let lastErr: unknown;
    for (const [i, password] of passwords.entries()) {
      try {
        await client.bind(identity, password);
        return i > 0;
      } catch (err) {
        lastErr = err;
        if (ldapResultCode(err) !== 49) break; // only a wrong password is worth trying another password
      }
    }
    // A plain connection opens at the first bind: a directory out of reach is a connection failure (#connect words it).
    if (isConnectionError(lastErr)) throw lastErr;
    const which = passwords.length > 1 ? 'current and prior passwords' : 'current password';
    throw toProviderError(lastErr, `failed to bind as the configured ${this.#config.upndomain ? 'binddn@upndomain' : 'binddn'} with ${which}`, this.#secrets);
  }

  /** The shared bound session, opened on first use and reopened when it was lost. */
  #getSession(): Promise<Session> {
    const current = this.#session;
    if (current) return current;
    const opening = this.#connect(async (client, url) => ({ client, url, usedFallback: await this.#bind(client) }));
    this.#session = opening;
    opening.catch(() => {
      if (this.#session === opening) this.#session = undefined;
    });
    return opening;
  }

  /** Forgets a session that failed, unless another operation already replaced it. */
  #discard(session: Promise<Session>): void {
    if (this.#session === session) this.#session = undefined;
    session.then((s) => s.client.unbind()).catch(() => undefined);
  }

  /**
   * Runs an operation on the shared session. When the connection was lost underneath it, the
   * operation is retried once on a new one, but only if `retry`: an add that reached the server
   * before the drop would come back as entryAlreadyExists.
   */
  async #run<T>(context: string, op: (c: Client) => Promise<T>, opts: { retry: boolean; secrets?: string[]; unknownWhenLost?: boolean }): Promise<T> {
    const secrets = [...this.#secrets, ...(opts.secrets ?? [])];
    for (let attempt = 0; ; attempt++) {
      const session = this.#getSession();
      let client: Client;
      try {
        ({ client } = await session);
      } catch (err) {
        throw toProviderError(err, context, secrets);
      }
      if (!client.isBound) {
        // The server closed an idle connection; ldapts would silently reconnect unauthenticated.
        this.#discard(session);
        if (attempt > 2) throw new LdapProviderError('connection', `${context}: the directory keeps closing the connection`);
        continue;
      }
      try {
        return await op(client);
      } catch (err) {
        if (!isConnectionError(err)) throw toProviderError(err, context, secrets);
        // ldapts has already destroyed a timed-out socket; the session goes with it, so nothing more is sent on it.
        this.#discard(session);
        if (opts.unknownWhenLost) {
          const lost = toProviderError(err, context, secrets);
          throw new UnknownWriteOutcomeError(lost.message, lost.detail);
        }
        if (!opts.retry || attempt > 0) throw toProviderError(err, context, secrets);
      }
    }
  }

  async checkBind(): Promise<BindCheck> {
    try {
      return await this.#connect(async (client, url) => {
        const usedFallback = await this.#bind(client);
        await client.unbind().catch(() => undefined);
        return { url, usedFallback };
      });
    } catch (err) {
      throw toProviderError(err, 'bind check', this.#secrets);
    }
  }

  async authenticate(dn: string, password: string): Promise<boolean> {
    // An empty password is an unauthenticated bind that "succeeds" without proving anything.
    if (!password) return false;
    const secrets = [...this.#secrets, password];
    try {
      return await this.#connect(async (client) => {
        try {
          await client.bind(dn, password);
          return true;
        } catch (err) {
          if (ldapResultCode(err) === 49) return false;
          throw err;
        } finally {
          await client.unbind().catch(() => undefined);
        }
      });
    } catch (err) {
      throw toProviderError(err, `bind as "${dn}"`, secrets);
    }
  }

  async findByDn(dn: string, attributes: string[] = ['1.1']): Promise<LdapEntry | undefined> {
    if (!isValidDn(dn)) throw new LdapProviderError('input', 'invalid value for field "dn": not a valid DN (RFC 4514)');
    return this.#run(`read entry "${dn}"`, async (c) => {
      try {
        const { searchEntries } = await c.search(dn, { scope: 'base', filter: '(objectClass=*)', attributes, derefAliases: 'never' });
        const e = searchEntries[0];
        return e ? toEntry(e) : undefined;
      } catch (err) {
        if (ldapResultCode(err) === 32) return undefined;
        throw err;
      }
    }, { retry: true });
  }

  async findByUsername(username: string, attributes?: string[]): Promise<LdapEntry | undefined> {
    const attr = this.#userattr;
    const base = this.#config.userdn ?? '';
    if (base && !isValidDn(base)) throw new LdapProviderError('input', 'invalid value for field "userdn": not a valid DN (RFC 4514)');
    return this.#search(base, equalityFilter(attr, username), attr, username, `username "${username}"`, attributes);
  }

  /** `what` names what is searched for; the filter and base are not quoted (they hold the stored config). */
  async #search(base: string, filter: string, attr: string, expected: string, what: string, attributes?: string[]): Promise<LdapEntry | undefined> {
    const requested = [...new Set([attr, ...(attributes ?? [])])];
    const found = await this.#run(`search for ${what} under ${this.#base}`, async (c) => {
      try {
        const { searchEntries } = await c.search(base, { scope: 'sub', filter, attributes: requested, derefAliases: 'never' });
        return searchEntries.map(toEntry);
      } catch (err) {
        if (ldapResultCode(err) === 32) return [];
        throw err;
      }
    }, { retry: true });
    const matches = this.#config.case_sensitive_names
      ? found.filter((e) => (e.attributes[attr.toLowerCase()] ?? []).includes(expected))
      : found;
    if (matches.length > 1) {
      throw new LdapProviderError('input', `expected one entry for ${what} under ${this.#base}, but found ${matches.length}`);
    }
    return matches[0];
  }

  async resolveAccount(ref: AccountRef): Promise<LdapEntry> {
    if (ref.dn) {
      const entry = await this.findByDn(ref.dn);
      if (!entry) throw new LdapProviderError('input', `dn: no entry "${ref.dn}" in the directory`, 32);
      return entry;
    }
    if (!ref.username) throw new LdapProviderError('input', 'username: a username or dn is required');
    const entry = await this.findByUsername(ref.username);
    if (!entry) {
      throw new LdapProviderError('input', `username: no entry with ${this.#config.userattr ? 'the configured userattr' : this.#userattr} equal to "${ref.username}" under ${this.#base}`, 32);
    }
    return entry;
  }

  async findBindEntry(): Promise<LdapEntry> {
    const { binddn, upndomain } = this.#config;
    if (upndomain) {
      // The UPN is matched as a filter value (escaped for RFC 4515), not DN-escaped: that mix-up was vault#25249.
      const upn = `${binddn}@${upndomain}`;
      const filter = andFilter('(objectClass=*)', equalityFilter('userPrincipalName', upn));
      const what = 'the configured binddn@upndomain';
      const entry = await this.#search(this.#config.userdn ?? '', filter, 'userPrincipalName', upn, what);
      if (!entry) throw new LdapProviderError('input', `binddn: no entry with userPrincipalName equal to ${what} under ${this.#base}`, 32);
      return entry;
    }
    const entry = await this.findByDn(binddn);
    if (!entry) throw new LdapProviderError('input', 'binddn: no entry with the configured binddn in the directory', 32);
    return entry;
  }

  async writeGuard(dn: string): Promise<WriteGuard | undefined> {
    if (!(await this.#supportsAssertion())) return undefined;
    const value = (await this.findByDn(dn, [CHANGE_MARKER]))?.attributes[CHANGE_MARKER.toLowerCase()]?.[0];
    return value ? { attribute: CHANGE_MARKER, value } : undefined;
  }

  #supportsAssertion(): Promise<boolean> {
    const known = this.#assertion;
    if (known) return known;
    const reading = this.#run('read the rootDSE', async (c) => {
      const { searchEntries } = await c.search('', { scope: 'base', filter: '(objectClass=*)', attributes: ['supportedControl'] });
      const controls = searchEntries[0]?.supportedControl ?? [];
      return (Array.isArray(controls) ? controls : [controls]).some((oid) => String(oid) === ASSERTION_CONTROL_OID);
    }, { retry: true }).catch(() => {
      // A rootDSE the account may not read, or a directory that did not answer: unconditional writes, asked again next time.
      if (this.#assertion === reading) this.#assertion = undefined;
      return false;
    });
    this.#assertion = reading;
    return reading;
  }

  async setPassword(dn: string, password: string, guard?: WriteGuard): Promise<void> {
    const changes = passwordChanges(this.#config.schema ?? 'openldap', password, this.#config.credential_type);
    const controls = guard ? [new AssertionControl(guard.attribute, guard.value)] : undefined;
    // Never re-sent (see LdapClient.setPassword): a replace is idempotent, but a late one undoes any change after it.
    await this.#run(`update password of "${dn}"`, (c) => c.modify(dn, changes.map(toLdapts), controls), { retry: false, secrets: [password], unknownWhenLost: true });
  }

  async add(dn: string, attributes: LdifAttribute[]): Promise<void> {
    const attrs = attributes.map((a) => new Attribute({ type: a.name, values: a.values as string[] }));
    await this.#run(`add "${dn}"`, (c) => c.add(dn, attrs), { retry: false, secrets: secretValues(attributes) });
  }

  async modify(dn: string, changes: LdifModification[]): Promise<void> {
    const secrets = secretValues(changes.map((c) => c.attribute));
    await this.#run(`modify "${dn}"`, (c) => c.modify(dn, changes.map(toLdapts)), { retry: false, secrets });
  }

  async delete(dn: string): Promise<void> {
    await this.#run(`delete "${dn}"`, (c) => c.del(dn), { retry: false });
  }

  executeLdif(records: readonly LdifRecord[], mode: LdifExecMode): Promise<LdifExecResult> {
    return executeLdif(this, records, mode);
  }

  async close(): Promise<void> {
    const current = this.#session;
    this.#session = undefined;
    await current?.then((s) => s.client.unbind()).catch(() => undefined);
  }
}

const SECRET_ATTRIBUTES = new Set(['userpassword', 'unicodepwd', 'racfpassword', 'racfpassphrase']);

/** Password values sent in an add/modify, so a server message that echoes them is scrubbed. */
function secretValues(attributes: LdifAttribute[]): string[] {
  return attributes
    .filter((a) => SECRET_ATTRIBUTES.has(a.name.toLowerCase()))
    .flatMap((a) => a.values.map((v) => (Buffer.isBuffer(v) ? v.toString('utf8') : v)));
}

export function createLdapClient(config: LdapConnectionConfig): LdapClient {
  return new LdaptsClient(config);
}
