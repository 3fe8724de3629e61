import { z } from 'zod';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { resolveEnvironment, type ResolveEnvironmentOptions } from '../../providers/azure/environments.ts';

const CONFIG_KEY = 'config';

export const configSchema = z.object({
  tenant_id: z.string(),
  resource: z.string(),
  environment: z.string(),
  client_id: z.string(),
  client_secret: z.string(),
  identity_token_audience: z.string(),
  identity_token_ttl: z.number().int().nonnegative(),
  max_retries: z.number().int().nonnegative(),
  retry_delay: z.number().int().nonnegative(),
  max_retry_delay: z.number().int().nonnegative(),
});

export type CloudAuthConfig = z.infer<typeof configSchema>;

const DEFAULTS: Omit<CloudAuthConfig, 'tenant_id' | 'resource'> = {
  environment: '', client_id: '', client_secret: '', identity_token_audience: '', identity_token_ttl: 3600,
  max_retries: 3, retry_delay: 4, max_retry_delay: 60,
};

/** Fields never returned by a read and kept when an update omits them. */
const SECRET_FIELDS = ['client_secret'] as const;

export async function readConfig(storage: StorageView): Promise<CloudAuthConfig | undefined> {
  return storage.getJson(CONFIG_KEY, (raw) => configSchema.parse(raw));
}

async function writeConfig(storage: StorageView, config: CloudAuthConfig): Promise<void> {
  await storage.putJson(CONFIG_KEY, configSchema.parse(config));
}

const TENANT = /^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+)$/i;

/** Cross-field rules on the merged config. */
export function validateConfig(c: CloudAuthConfig, envOptions: ResolveEnvironmentOptions = {}): void {
  if (!c.tenant_id) throw new BadRequestError('missing required field "tenant_id": tenant_id is required');
  if (!TENANT.test(c.tenant_id)) throw new BadRequestError('invalid value for field "tenant_id": expected a tenant GUID or a verified domain name');
  if (!c.resource) throw new BadRequestError('missing required field "resource": resource is required (the audience of the tokens workloads present)');
  if (/\s/.test(c.resource) || c.resource.length > 1024) throw new BadRequestError('invalid value for field "resource": expected an application id URI without whitespace, at most 1024 characters');
  if (c.client_secret && c.identity_token_audience) {
    throw new BadRequestError(`invalid value for field "identity_token_audience": only one of 'client_secret' or 'identity_token_audience' can be set`);
  }
  if (c.identity_token_audience.length >= 600) throw new BadRequestError('invalid value for field "identity_token_audience": must be shorter than 600 characters');
  if (c.client_secret && !c.client_id) throw new BadRequestError('missing required field "client_id": client_id is required with client_secret');
  if (c.identity_token_audience && !c.client_id) throw new BadRequestError('missing required field "client_id": client_id is required with identity_token_audience');
  if (c.max_retries > 20) throw new BadRequestError('invalid value for field "max_retries": at most 20');
  if (c.retry_delay > c.max_retry_delay) throw new BadRequestError('invalid value for field "retry_delay": cannot be greater than max_retry_delay');
  try {
    resolveEnvironment(c.environment, envOptions);
  } catch (err) {
    throw new BadRequestError(`invalid value for field "environment": ${(err as Error).message.replace(/^environment:\s*/, '')}`);
  }
}

function configView(c: CloudAuthConfig): Record<string, unknown> {
  const view: Record<string, unknown> = { ...c };
  for (const f of SECRET_FIELDS) delete view[f];
  return view;
}

const fields = {
  tenant_id: field.string('Tenant (directory) id or verified domain whose tokens are accepted.'),
  resource: field.string('Audience the login JWTs must carry (aud), e.g. https://management.azure.com/.'),
  environment: field.string('Cloud: AzurePublicCloud (default), AzureUSGovernmentCloud, AzureChinaCloud or the name in CLOUD_ENVIRONMENT_FILEPATH.'),
  client_id: field.string('Client id of the application used for ARM calls (VM, scale set and resource_id logins).'),
  client_secret: field.string('Client secret of that application; without it a managed identity or federation is used.', { secret: true }),
  identity_token_audience: field.string('Audience of plugin identity tokens for workload identity federation (instead of client_secret).'),
  identity_token_ttl: field.duration('TTL of plugin identity tokens used for federation.'),
  max_retries: field.int('Retries of a throttled or failed ARM call (at most 20).', { min: 0, max: 20 }),
  retry_delay: field.duration('Initial delay between ARM retries (exponential, jittered; at most 5m).', { max: 300 }),
  max_retry_delay: field.duration('Maximum delay between ARM retries (at most 5m).', { max: 300 }),
};

export interface ConfigPathDeps {
  envOptions: ResolveEnvironmentOptions;
  /** Drops the cached config and the verifiers and clients built from it. */
  onChange(): void;
}

export function configPaths(deps: ConfigPathDeps): PathDefinition[] {
  return [
    definePath({
      pattern: 'config',
      description: 'Tenant, expected audience and the credentials used to verify resources with ARM.',
      fields,
      existenceCheck: async (req) => (await readConfig(req.storage)) !== undefined,
      operations: {
        read: async (req) => {
          const c = await readConfig(req.storage);
          return c ? { data: configView(c) } : undefined;
        },
        update: async (req) => {
          const current = (await readConfig(req.storage)) ?? { ...DEFAULTS, tenant_id: '', resource: '' };
          const next: CloudAuthConfig = { ...current };
          for (const name of Object.keys(fields) as Array<keyof typeof fields>) {
            const value = req.data[name];
            if (req.has(name)) (next as Record<string, unknown>)[name] = typeof value === 'string' && !fields[name].secret ? value.trim() : value;
          }
          validateConfig(next, deps.envOptions);
          // Also after a failed write: a login may have cached the value while it was queued.
          try {
            await writeConfig(req.storage, next);
          } finally {
            deps.onChange();
          }
        },
        delete: async (req) => {
          try {
            await req.storage.delete(CONFIG_KEY);
          } finally {
            deps.onChange();
          }
        },
      },
    }),
  ];
}
