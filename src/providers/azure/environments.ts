/**
 * Azure clouds the providers can talk to. Names match case-insensitively, as in Vault. Besides the
 * three national clouds, a custom one (a sovereign deployment, or the test emulator) comes from the
 * JSON file named by CLOUD_ENVIRONMENT_FILEPATH and is used when the configured name equals its `name`.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { AzureProviderError } from './errors.ts';

export interface AzureEnvironment {
  name: string;
  /** Authority host for Entra ID, without a trailing slash. */
  activeDirectoryEndpoint: string;
  resourceManagerEndpoint: string;
  microsoftGraphEndpoint: string;
  custom: boolean;
}

export const AZURE_PUBLIC_CLOUD: AzureEnvironment = {
  name: 'AzurePublicCloud',
  activeDirectoryEndpoint: 'https://login.microsoftonline.com',
  resourceManagerEndpoint: 'https://management.azure.com',
  microsoftGraphEndpoint: 'https://graph.microsoft.com',
  custom: false,
};

export const AZURE_US_GOVERNMENT_CLOUD: AzureEnvironment = {
  name: 'AzureUSGovernmentCloud',
  activeDirectoryEndpoint: 'https://login.microsoftonline.us',
  resourceManagerEndpoint: 'https://management.usgovcloudapi.net',
  microsoftGraphEndpoint: 'https://graph.microsoft.us',
  custom: false,
};

export const AZURE_CHINA_CLOUD: AzureEnvironment = {
  name: 'AzureChinaCloud',
  activeDirectoryEndpoint: 'https://login.chinacloudapi.cn',
  resourceManagerEndpoint: 'https://management.chinacloudapi.cn',
  microsoftGraphEndpoint: 'https://microsoftgraph.chinacloudapi.cn',
  custom: false,
};

export const BUILTIN_ENVIRONMENTS: readonly AzureEnvironment[] = [AZURE_PUBLIC_CLOUD, AZURE_US_GOVERNMENT_CLOUD, AZURE_CHINA_CLOUD];

export const ENVIRONMENT_FILE_VAR = 'CLOUD_ENVIRONMENT_FILEPATH';

const endpoint = z
  .string()
  .url()
  .refine((u) => new URL(u).protocol === 'https:', 'must be an https URL')
  .transform((u) => u.replace(/\/+$/, ''));

const customEnvironmentSchema = z.object({
  name: z.string().min(1),
  activeDirectoryEndpoint: endpoint,
  resourceManagerEndpoint: endpoint,
  microsoftGraphEndpoint: endpoint,
});

export interface ResolveEnvironmentOptions {
  env?: NodeJS.ProcessEnv;
  readFile?: (path: string) => string;
}

function loadCustom(path: string, readFile: (p: string) => string): AzureEnvironment {
  let raw: unknown;
  try {
    raw = JSON.parse(readFile(path));
  } catch (err) {
    throw new AzureProviderError('input', `${ENVIRONMENT_FILE_VAR}: cannot read a JSON cloud environment from "${path}": ${(err as Error).message}`);
  }
  const parsed = customEnvironmentSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new AzureProviderError('input', `${ENVIRONMENT_FILE_VAR}: field "${issue.path.join('.')}" ${issue.message}`);
  }
  return { ...parsed.data, custom: true };
}

/** Empty means the public cloud; an unknown name is a 400 that names the `environment` field. */
export function resolveEnvironment(name: string | undefined, opts: ResolveEnvironmentOptions = {}): AzureEnvironment {
  const env = opts.env ?? process.env;
  const wanted = (name ?? '').trim();
  if (wanted === '') return AZURE_PUBLIC_CLOUD;
  const builtin = BUILTIN_ENVIRONMENTS.find((e) => e.name.toLowerCase() === wanted.toLowerCase());
  if (builtin) return builtin;
  const file = env[ENVIRONMENT_FILE_VAR];
  if (file) {
    const custom = loadCustom(file, opts.readFile ?? ((p) => readFileSync(p, 'utf8')));
    if (custom.name.toLowerCase() === wanted.toLowerCase()) return custom;
  }
  const known = [...BUILTIN_ENVIRONMENTS.map((e) => e.name), ...(file ? ['the name in ' + ENVIRONMENT_FILE_VAR] : [])];
  throw new AzureProviderError('input', `environment: no cloud configuration matching the name "${wanted}"; expected one of ${known.join(', ')}`);
}

/** The token scope for a resource API: `<endpoint>/.default`. */
export function scopeFor(endpointUrl: string): string {
  return `${endpointUrl.replace(/\/+$/, '')}/.default`;
}
