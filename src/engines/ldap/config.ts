/** `ldap/config`: the endpoint that reads, writes and deletes the connection settings (stored by config-store.ts). */
import { BadRequestError, ConflictError, invalidField } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath } from '../../core/framework.ts';
import { LDAP_SCHEMAS, defaultUserAttr, isLdapSchema } from '../../providers/ldap/schemas.ts';
import { accountKeys, describeOwner } from './accounts.ts';
import { applyScheduleFields, rootScheduleFields, rootScheduleView } from '../root-rotation.ts';
import { bindHistory } from './bind-history.ts';
import {
  CONFIG_KEY, DEFAULT_CONNECTION_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, DEFAULT_URL, DEFAULT_VERIFY_RATE, DRIFT_ACTIONS, MAX_VERIFY_RATE, MIN_VERIFY_PERIOD,
  ROOT_WAL_KEY, TLS_NAMES, configuredBindAccount, putConfigOp, readConfig, readConfigSnapshot, sameBindAccount, storedConfigSchema, toConnectionConfig,
  validateConfig, walPassword, type LdapConfig,
} from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';

const configFields = {
  binddn: field.string('DN of the bind object; with upndomain, the user part of <binddn>@<upndomain>.'),
  bindpass: field.string('Password of the bind object. Never returned.', { secret: true }),
  url: field.string('LDAP URL, or a comma-separated list tried in order on connection errors.'),
  password_policy: field.string('Name of the password policy used to generate passwords (resolved at generation time).'),
  schema: field.string('Directory schema: openldap, ad or racf.', { oneOf: LDAP_SCHEMAS }),
  credential_type: field.string('racf only: "password" (racfPassword) or "phrase" (racfPassPhrase).', { oneOf: ['password', 'phrase'] }),
  userdn: field.string('Base DN of user searches (static roles, library accounts).'),
  userattr: field.string('Attribute matched against usernames; default cn (openldap), userPrincipalName (ad), racfid (racf).'),
  upndomain: field.string('Bind as <binddn>@<upndomain>.'),
  request_timeout: field.duration('Timeout of a connection attempt and of each request. Default 90s, at most 1h.', { max: 3600 }),
  connection_timeout: field.duration('Deprecated: when set, the smaller of this and request_timeout is used for both (at most 1h).', { max: 3600 }),
  starttls: field.bool('Issue StartTLS after connecting with ldap://.'),
  insecure_tls: field.bool('Skip server certificate verification (never do this in production).'),
  certificate: field.string('PEM CA certificate(s) trusted for the server.'),
  client_tls_cert: field.string('PEM client certificate.'),
  client_tls_key: field.string('PEM client key. Never returned.', { secret: true }),
  tls_min_version: field.string('Minimum TLS version: tls10, tls11, tls12 (default) or tls13.', { oneOf: TLS_NAMES }),
  tls_max_version: field.string('Maximum TLS version: tls10, tls11, tls12 or tls13 (default).', { oneOf: TLS_NAMES }),
  case_sensitive_names: field.bool('When true, a username lookup only accepts an entry whose userattr matches with the same case.'),
  skip_static_role_import_rotation: field.bool('Default of skip_import_rotation for new static roles.'),
  length: field.int('Deprecated: length of generated passwords (default 64, at most 100 like a password policy). Exclusive with password_policy.', { min: 0, max: 100 }),
  ...rootScheduleFields,
  verify_period: field.duration(`Drift detection: how often the leader binds as each static role and available library account with the password it holds (at least ${MIN_VERIFY_PERIOD}s); 0 (default): off.`, { max: 30 * 86_400 }),
  drift_action: field.string('What a detected drift does: report (default: marks the account) or rotate (also gives it a new password through the bind account).', { oneOf: DRIFT_ACTIONS }),
  verify_rate: field.int(`Drift verification binds per second (default ${DEFAULT_VERIFY_RATE}, at most ${MAX_VERIFY_RATE}).`, { min: 1, max: MAX_VERIFY_RATE }),
};

type ConfigFieldName = keyof typeof configFields;

function enumValue<T extends string>(name: string, value: string, allowed: readonly T[]): T {
  const v = value.trim().toLowerCase();
  if (!(allowed as readonly string[]).includes(v)) throw invalidField(name, `expected one of ${allowed.join(', ')}`);
  return v as T;
}

/** The stored config after applying the fields the request sent; unsent fields keep their value. */
export function mergeConfig(existing: LdapConfig | undefined, sent: Partial<Record<ConfigFieldName, unknown>>): LdapConfig {
  const base: LdapConfig = existing ?? storedConfigSchema.parse({ url: DEFAULT_URL, binddn: '', bindpass: '' });
  const next: LdapConfig = { ...base };
  const str = (k: ConfigFieldName) => (sent[k] as string).trim();
  for (const k of ['url', 'binddn', 'userdn', 'upndomain', 'userattr', 'password_policy'] as const) if (k in sent) next[k] = str(k);
  for (const k of ['bindpass', 'certificate', 'client_tls_cert', 'client_tls_key'] as const) if (k in sent) next[k] = sent[k] as string;
  for (const k of ['starttls', 'insecure_tls', 'case_sensitive_names', 'skip_static_role_import_rotation'] as const) if (k in sent) next[k] = sent[k] as boolean;
  if ('length' in sent) next.length = sent.length as number;
  if ('verify_period' in sent) next.verify_period = sent.verify_period as number;
  if ('verify_rate' in sent) next.verify_rate = sent.verify_rate as number;
  if ('drift_action' in sent) next.drift_action = enumValue('drift_action', sent.drift_action as string, DRIFT_ACTIONS);
  if ('request_timeout' in sent) next.request_timeout = (sent.request_timeout as number) || DEFAULT_REQUEST_TIMEOUT;
  if ('connection_timeout' in sent) next.connection_timeout = sent.connection_timeout as number;
  if ('schema' in sent) {
    const schema = (sent.schema as string).trim().toLowerCase();
    if (!schema) throw new BadRequestError('schema: must not be empty');
    if (!isLdapSchema(schema)) throw invalidField('schema', `not a supported schema (${LDAP_SCHEMAS.join(', ')})`);
    next.schema = schema;
  }
  if ('credential_type' in sent) next.credential_type = enumValue('credential_type', sent.credential_type as string, ['password', 'phrase']);
  if ('tls_min_version' in sent) next.tls_min_version = enumValue('tls_min_version', sent.tls_min_version as string, TLS_NAMES);
  if ('tls_max_version' in sent) next.tls_max_version = enumValue('tls_max_version', sent.tls_max_version as string, TLS_NAMES);
  if (next.url === '') next.url = DEFAULT_URL;
  // userattr follows the schema until the operator names one.
  if (!existing && !('userattr' in sent && next.userattr)) next.userattr = defaultUserAttr(next.schema);
  return next;
}

/** The read shape: bindpass, client_tls_key and the previous bind password are never returned. */
export function configReadData(config: LdapConfig, now: number): Record<string, unknown> {
  return {
    binddn: config.binddn,
    url: config.url,
    userdn: config.userdn,
    userattr: config.userattr || defaultUserAttr(config.schema),
    upndomain: config.upndomain,
    schema: config.schema,
    credential_type: config.credential_type,
    request_timeout: config.request_timeout,
    connection_timeout: config.connection_timeout || DEFAULT_CONNECTION_TIMEOUT,
    starttls: config.starttls,
    insecure_tls: config.insecure_tls,
    certificate: config.certificate,
    client_tls_cert: config.client_tls_cert,
    tls_min_version: config.tls_min_version,
    tls_max_version: config.tls_max_version,
    case_sensitive_names: config.case_sensitive_names,
    skip_static_role_import_rotation: config.skip_static_role_import_rotation,
    ...(config.length > 0 ? { length: config.length } : {}),
    ...(config.password_policy ? { password_policy: config.password_policy } : {}),
    ...(config.last_bind_password_rotation ? { last_bind_password_rotation: new Date(config.last_bind_password_rotation).toISOString() } : {}),
    ...rootScheduleView(config, now),
    verify_period: config.verify_period,
    drift_action: config.drift_action,
    verify_rate: config.verify_rate,
  };
}

export function configPart(engine: LdapEngine): LdapEnginePart {
  const { storage } = engine;
  const write = (sent: Partial<Record<ConfigFieldName, unknown>>) => engine.locks.run(CONFIG_KEY, async () => {
    const snapshot = await readConfigSnapshot(storage);
    const existing = snapshot?.config;
    const next = mergeConfig(existing, sent);
    Object.assign(next, applyScheduleFields(sent as Parameters<typeof applyScheduleFields>[0], next, engine.clock.now(), next.last_bind_password_rotation));
    validateConfig(next);
    // Values, not the keys sent: an operator or IaC re-posting the same binddn or bindpass changes nothing.
    const newPassword = existing !== undefined && next.bindpass !== existing.bindpass;
    const newAccount = existing !== undefined && !sameBindAccount(next, existing);
    // A new bind account or password ends any rotate-root grace: the operator states the directory's password, and a
    // wrong one must fail at once, not be hidden by an older one. Only an unfinished rotate-root's password, which this
    // write drops and which may still be on its way to the directory, stays a fallback (until a verified bind).
    const walRaw = await storage.get(ROOT_WAL_KEY);
    if (newPassword || newAccount) {
      next.last_bind_password = '';
      next.unconfirmed_bind_passwords = newAccount ? [] : bindHistory([walPassword(walRaw)], next.bindpass);
    }
    // Builds (without connecting) a client, so anything the provider refuses is a 400 now, not at first use.
    engine.options.createClient(toConnectionConfig(next));
    // An unfinished rotate-root's WAL may hold the only password the directory accepts for the bind account.
    // A bindpass the operator supplies supersedes it (they know the directory's password); a new account
    // without one would leave the WAL's password to be tried on, and finished against, the wrong entry.
    if (walRaw && newAccount && !newPassword) {
      throw new BadRequestError(`${next.upndomain !== existing!.upndomain ? 'upndomain' : 'binddn'}: a rotate-root of the current bind account is unfinished and ` +
        'its new password may be the only one the directory accepts; finish it with ldap/rotate-root, or send the bindpass of the new account with this change');
    }
    // The engine never manages itself, seen from this side: no role or set may already manage the new bind account.
    const bind = configuredBindAccount(next);
    if (!existing || accountKeys(bind).join() !== accountKeys(configuredBindAccount(existing)).join()) {
      const owner = await engine.accounts.ownerOf(bind);
      if (owner) {
        throw new BadRequestError(`binddn: the account is one this secrets engine manages (${describeOwner(owner)}); ` +
          'the engine never manages its own bind account, so take it out of there first');
      }
    }
    const ops = [putConfigOp(next), ...(walRaw && newPassword ? [{ type: 'delete', key: ROOT_WAL_KEY } as const] : [])];
    // Over the config as read, too: a whole rotate-root on another node between the read and this write leaves no
    // WAL behind, and writing the old bindpass back would lose the password the directory now has.
    if (!(await storage.transaction(ops, [{ key: ROOT_WAL_KEY, expected: walRaw }, { key: CONFIG_KEY, expected: snapshot?.raw }]))) {
      throw new ConflictError('a rotate-root changed the bind password meanwhile; retry the request');
    }
  });
  const changed = async () => {
    for (const watcher of engine.configWatchers) await watcher();
  };

  return {
    paths: [
      definePath({
        pattern: 'config',
        description: 'Connection to the directory and password generation settings.',
        fields: configFields,
        existenceCheck: async () => (await readConfig(storage)) !== undefined,
        operations: {
          read: async () => {
            const config = await readConfig(storage);
            return config ? { data: configReadData(config, engine.clock.now()) } : undefined;
          },
          update: async (req) => {
            const sent = Object.fromEntries((Object.keys(configFields) as ConfigFieldName[]).filter((k) => req.has(k)).map((k) => [k, req.data[k]]));
            await write(sent);
            await changed();
          },
          delete: async () => engine.locks.run(CONFIG_KEY, async () => {
            const blocking: string[] = [];
            const remedies = new Set<string>();
            for (const dep of engine.configDependents) {
              const names = await dep.names();
              if (!names.length) continue;
              blocking.push(`${names.length} ${dep.what} (${names.slice(0, 5).join(', ')}${names.length > 5 ? ', ...' : ''})`);
              remedies.add(dep.remedy ?? 'delete');
            }
            if (blocking.length) {
              throw new BadRequestError(`cannot delete the configuration while ${blocking.join(' and ')} use it; ${[...remedies].join(' or ')} them first`);
            }
            // Never with an unfinished rotate-root: its WAL may hold the bind account's only password.
            if (!(await storage.transaction([{ type: 'delete', key: CONFIG_KEY }], [{ key: ROOT_WAL_KEY, expected: undefined }]))) {
              throw new BadRequestError('cannot delete the configuration while a rotate-root is unfinished: its new password may be the only one the ' +
                'directory accepts for the bind account; finish it with ldap/rotate-root, or write the bind password you know to ldap/config, first');
            }
            await engine.connections.close();
          }).then(changed),
        },
      }),
    ],
  };
}
