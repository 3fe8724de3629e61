import { z } from 'zod';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition, type SystemView } from '../../core/framework.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import { cloudEvent } from './events.ts';
import { resolveEnvironment, type ResolveEnvironmentOptions } from '../../providers/azure/environments.ts';
import { NO_ROOT_SCHEDULE, applyScheduleFields, rootScheduleFields, rootScheduleShape, rootScheduleView } from '../root-rotation.ts';

const CONFIG_KEY = 'config';

/** The root password rotate-root created and is switching to; kept until the switch is complete. */
const pendingRootSchema = z.object({
  client_secret: z.string(),
  key_id: z.string(),
  display_name: z.string(),
  expiration: z.string(),
  app_object_id: z.string(),
  /** keyId of the password being replaced; '' when it could not be identified (then it stays). */
  previous_key_id: z.string(),
});
export type PendingRoot = z.infer<typeof pendingRootSchema>;

export const configSchema = z.object({
  subscription_id: z.string(),
  tenant_id: z.string(),
  client_id: z.string(),
  client_secret: z.string(),
  environment: z.string(),
  identity_token_audience: z.string(),
  identity_token_ttl: z.number().int().nonnegative(),
  root_password_ttl: z.number().int().positive(),
  /** keyId of client_secret once rotate-root made it ('' for a secret the operator supplied). */
  client_secret_key_id: z.string().default(''),
  root_password_expiration_date: z.string().default(''),
  pending_root: pendingRootSchema.nullable().default(null),
  /**
   * Default of static roles' seamless_rotation. A config stored before the field existed reads false (its roles keep
   * the add-switch-remove rotation they had); a config created now starts from EMPTY, true.
   */
  seamless_rotation: z.boolean().default(false),
  /** Automated rotation of the client secret and its state (root-rotation.ts). */
  ...rootScheduleShape,
});
export type CloudConfig = z.infer<typeof configSchema>;

export const ROOT_PASSWORD_TTL_DEFAULT = 182 * 86_400;
const IDENTITY_TOKEN_TTL_DEFAULT = 3600;

const EMPTY: CloudConfig = {
  subscription_id: '', tenant_id: '', client_id: '', client_secret: '', environment: '', identity_token_audience: '',
  identity_token_ttl: IDENTITY_TOKEN_TTL_DEFAULT, root_password_ttl: ROOT_PASSWORD_TTL_DEFAULT,
  client_secret_key_id: '', root_password_expiration_date: '', pending_root: null, seamless_rotation: true, ...NO_ROOT_SCHEDULE,
};

/** Environment variables that win over the stored value (spec: "environment variables override"). */
export const ENV_OVERRIDES = {
  subscription_id: 'CLOUD_SUBSCRIPTION_ID',
  tenant_id: 'CLOUD_TENANT_ID',
  client_id: 'CLOUD_CLIENT_ID',
  client_secret: 'CLOUD_CLIENT_SECRET',
  environment: 'CLOUD_ENVIRONMENT',
} as const satisfies Partial<Record<keyof CloudConfig, string>>;

export async function readConfig(storage: StorageView): Promise<CloudConfig | undefined> {
  return (await readConfigSnapshot(storage))?.config;
}

/** The config with the bytes it was read from, which a guarded write (writeConfigGuarded) expects unchanged. */
export async function readConfigSnapshot(storage: StorageView): Promise<{ config: CloudConfig; raw: Buffer } | undefined> {
  const raw = await storage.get(CONFIG_KEY);
  return raw && { config: configSchema.parse(JSON.parse(raw.toString('utf8'))), raw };
}

/** Writes the config, with `alongside` (its event) in the same transaction. */
export async function writeConfig(storage: StorageView, config: CloudConfig, alongside: PreparedWrite[] = []): Promise<void> {
  await storage.transaction([{ type: 'put', key: CONFIG_KEY, value: jsonBytes(configSchema.parse(config)) }], [], alongside);
}

/** Writes the config only over `expected` (the bytes read), with `alongside` (a fence for leader work, an event). False when not. */
export async function writeConfigGuarded(storage: StorageView, config: CloudConfig, expected: Buffer | undefined, alongside: PreparedWrite[]): Promise<boolean> {
  return storage.transaction([{ type: 'put', key: CONFIG_KEY, value: jsonBytes(configSchema.parse(config)) }], [{ key: CONFIG_KEY, expected }], alongside);
}

/**
 * Writes `change(config as read)` guarded on the bytes read, reading again when another write came between (a few
 * times, or until `stop()`): 'written'; 'declined' when there is no config or `change` answers undefined; 'raced' when
 * every attempt lost. A config written meanwhile is never undone.
 */
export async function updateConfigGuarded(
  storage: StorageView,
  change: (config: CloudConfig) => { config: CloudConfig; alongside: PreparedWrite[] } | undefined,
  stop: () => boolean = () => false,
): Promise<'written' | 'declined' | 'raced'> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const snapshot = await readConfigSnapshot(storage);
    const next = snapshot && change(snapshot.config);
    if (!next) return 'declined';
    if (await writeConfigGuarded(storage, next.config, snapshot.raw, next.alongside)) return 'written';
    if (stop()) break;
  }
  return 'raced';
}

async function deleteConfig(storage: StorageView, event: PreparedWrite): Promise<void> {
  await storage.transaction([{ type: 'delete', key: CONFIG_KEY }], [], [event]);
}

/** The config the engine acts with: stored values with the CLOUD_* environment variables applied. */
export function effectiveConfig(stored: CloudConfig, env: NodeJS.ProcessEnv): CloudConfig {
  const out = { ...stored };
  for (const [name, variable] of Object.entries(ENV_OVERRIDES) as Array<[keyof typeof ENV_OVERRIDES, string]>) {
    const value = env[variable]?.trim();
    if (value) out[name] = value;
  }
  return out;
}

/** Client ids (appIds) are GUIDs: any case, and surrounding space, name the same application. */
export const sameAppId = (a: string, b: string): boolean => a.trim().toLowerCase() === b.trim().toLowerCase();

/** Whether `appId` is the application the engine signs in as. */
export function isEngineApp(config: Pick<CloudConfig, 'client_id'>, appId: string): boolean {
  return config.client_id !== '' && sameAppId(appId, config.client_id);
}

/** Which of the overridable fields currently come from the environment. */
export function overriddenFields(env: NodeJS.ProcessEnv): Array<keyof typeof ENV_OVERRIDES> {
  return (Object.keys(ENV_OVERRIDES) as Array<keyof typeof ENV_OVERRIDES>).filter((name) => !!env[ENV_OVERRIDES[name]]?.trim());
}

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const TENANT = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+)$/i;

/**
 * Rules on the merged config as the engine will use it (environment variables applied), so a value
 * that can only come from the environment still satisfies "required".
 */
export function validateConfig(c: CloudConfig, envOptions: ResolveEnvironmentOptions): void {
  if (!c.subscription_id) throw new BadRequestError(`missing required field "subscription_id" (or set ${ENV_OVERRIDES.subscription_id})`);
  if (!GUID.test(c.subscription_id)) throw new BadRequestError('invalid value for field "subscription_id": expected a subscription GUID');
  if (!c.tenant_id) throw new BadRequestError(`missing required field "tenant_id" (or set ${ENV_OVERRIDES.tenant_id})`);
  if (!TENANT.test(c.tenant_id)) throw new BadRequestError('invalid value for field "tenant_id": expected a tenant GUID or a verified domain name');
  if (c.client_secret && c.identity_token_audience) {
    throw new BadRequestError(`invalid value for field "identity_token_audience": only one of 'client_secret' or 'identity_token_audience' can be set`);
  }
  if (c.identity_token_audience.length >= 600) throw new BadRequestError('invalid value for field "identity_token_audience": must be shorter than 600 characters');
  if (c.identity_token_audience && (c.rotation_period || c.rotation_schedule) && !c.disable_automated_rotation) {
    throw new BadRequestError('invalid value for field "rotation_period": automated root rotation rotates a client_secret; with identity_token_audience the engine holds none');
  }
  if ((c.client_secret || c.identity_token_audience) && !c.client_id) {
    throw new BadRequestError(`missing required field "client_id": client_id is required with ${c.client_secret ? 'client_secret' : 'identity_token_audience'}`);
  }
  try {
    resolveEnvironment(c.environment, envOptions);
  } catch (err) {
    throw new BadRequestError(`invalid value for field "environment": ${(err as Error).message.replace(/^environment:\s*/, '')}`);
  }
}

function configView(c: CloudConfig, now: number): Record<string, unknown> {
  return {
    subscription_id: c.subscription_id,
    tenant_id: c.tenant_id,
    client_id: c.client_id,
    environment: c.environment,
    root_password_ttl: c.root_password_ttl,
    identity_token_audience: c.identity_token_audience,
    identity_token_ttl: c.identity_token_ttl,
    seamless_rotation: c.seamless_rotation,
    ...(c.root_password_expiration_date ? { root_password_expiration_date: c.root_password_expiration_date } : {}),
    ...rootScheduleView(c, now),
  };
}

const ownFields = {
  subscription_id: field.string(`Subscription whose role definitions roles are resolved against. ${ENV_OVERRIDES.subscription_id} overrides it.`),
  tenant_id: field.string(`Tenant (directory) id. ${ENV_OVERRIDES.tenant_id} overrides it.`),
  client_id: field.string(`Client id of the engine's own application. ${ENV_OVERRIDES.client_id} overrides it.`),
  client_secret: field.string(`Client secret of that application; never returned. ${ENV_OVERRIDES.client_secret} overrides it.`, { secret: true }),
  environment: field.string(`AzurePublicCloud (default when empty), AzureUSGovernmentCloud, AzureChinaCloud or the name in CLOUD_ENVIRONMENT_FILEPATH. ${ENV_OVERRIDES.environment} overrides it.`),
  identity_token_audience: field.string('Audience of plugin identity tokens for workload identity federation; excludes client_secret.'),
  identity_token_ttl: field.duration('Lifetime of plugin identity tokens (default 1h).'),
  root_password_ttl: field.duration('Validity of the client secret rotate-root creates (default 182d).'),
  seamless_rotation: field.bool('Default of static roles\' seamless_rotation: stage the next client secret to start before the current one expires (default true).'),
};
const fields = { ...ownFields, ...rootScheduleFields };
const CONFIG_FIELDS = Object.keys(ownFields) as Array<keyof typeof ownFields>;

export interface ConfigPathDeps {
  env: NodeJS.ProcessEnv;
  envOptions: ResolveEnvironmentOptions;
  /** Serialises config writes with rotate-root, which also rewrites the config. */
  withConfigLock<T>(fn: () => Promise<T>): Promise<T>;
  /** The name of a role whose credentials are passwords on this application, if any. */
  roleIssuingOn(storage: StorageView, appId: string): Promise<string | undefined>;
  /** Drops clients built from the previous config and re-reads the automated rotation's schedule. */
  onChange(): Promise<void>;
  now(): number;
  /** Where the config's events are made. */
  system: Pick<SystemView, 'event'>;
}

export function configPaths(deps: ConfigPathDeps): PathDefinition[] {
  return [
    definePath({
      pattern: 'config',
      description: 'Credentials and subscription the engine uses to manage applications, principals and role assignments.',
      fields,
      existenceCheck: async (req) => (await readConfig(req.storage)) !== undefined,
      operations: {
        read: async (req) => {
          const c = await readConfig(req.storage);
          return c ? { data: configView(c, deps.now()) } : undefined;
        },
        update: (req) => deps.withConfigLock(async () => {
          const current = (await readConfig(req.storage)) ?? EMPTY;
          const next: CloudConfig = { ...current };
          for (const name of CONFIG_FIELDS) {
            if (!req.has(name)) continue;
            const value = req.data[name];
            (next as Record<string, unknown>)[name] = typeof value === 'string' && name !== 'client_secret' ? value.trim() : value;
          }
          Object.assign(next, applyScheduleFields({
            rotation_period: req.data.rotation_period, rotation_schedule: req.data.rotation_schedule,
            rotation_window: req.data.rotation_window, disable_automated_rotation: req.data.disable_automated_rotation,
          }, next, deps.now(), 0));
          if (req.has('identity_token_ttl') && next.identity_token_ttl === 0) next.identity_token_ttl = IDENTITY_TOKEN_TTL_DEFAULT;
          if (req.has('root_password_ttl') && next.root_password_ttl === 0) next.root_password_ttl = ROOT_PASSWORD_TTL_DEFAULT;
          // A new secret from the operator is not the one rotate-root created.
          if (req.has('client_secret') && next.client_secret !== current.client_secret) {
            next.client_secret_key_id = '';
            next.root_password_expiration_date = '';
          }
          // Checked as the engine will use it: a value may come from the environment alone, and an
          // environment secret next to a stored audience is as ambiguous as both stored.
          const effective = effectiveConfig(next, deps.env);
          validateConfig(effective, deps.envOptions);
          // The engine never manages itself: switching it to an application a role hands out passwords on
          // (or owns, with persist_app) is refused here, where the operator can still pick another. creds and
          // role writes check again, for a client_id that only the environment changed.
          const switched = effective.client_id !== '' && !isEngineApp(effectiveConfig(current, deps.env), effective.client_id);
          const role = switched ? await deps.roleIssuingOn(req.storage, effective.client_id) : undefined;
          if (role) {
            throw new BadRequestError(`invalid value for field "client_id": role '${role}' issues credentials on this application, and the engine may not manage its own application; change or delete the role first`);
          }
          await writeConfig(req.storage, next, [cloudEvent(deps.system, 'config-write', { operation: req.operation, path: 'config' })]);
        }).then(deps.onChange),
        delete: (req) => deps.withConfigLock(async () => {
          await deleteConfig(req.storage, cloudEvent(deps.system, 'config-delete', { operation: 'delete', path: 'config' }));
        }).then(deps.onChange),
      },
    }),
  ];
}
