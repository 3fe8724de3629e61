import { describe, expect, it } from 'vitest';
import { AZURE_CHINA_CLOUD, AZURE_PUBLIC_CLOUD, AZURE_US_GOVERNMENT_CLOUD, resolveEnvironment, scopeFor } from '../../src/providers/azure/environments.ts';
import { selectCredentialKind } from '../../src/providers/azure/credentials.ts';
import { configKey } from '../../src/providers/azure/clients.ts';

const custom = { name: 'Local', activeDirectoryEndpoint: 'https://127.0.0.1:8443/', resourceManagerEndpoint: 'https://127.0.0.1:8445', microsoftGraphEndpoint: 'https://127.0.0.1:8444' };
const withFile = (content: unknown) => ({ env: { CLOUD_ENVIRONMENT_FILEPATH: '/env.json' }, readFile: () => (typeof content === 'string' ? content : JSON.stringify(content)) });

describe('resolveEnvironment', () => {
  it.each([
    ['', AZURE_PUBLIC_CLOUD],
    [undefined, AZURE_PUBLIC_CLOUD],
    ['AzurePublicCloud', AZURE_PUBLIC_CLOUD],
    ['azureusgovernmentcloud', AZURE_US_GOVERNMENT_CLOUD],
    ['AZURECHINACLOUD', AZURE_CHINA_CLOUD],
  ])('%s → %s', (name, expected) => {
    expect(resolveEnvironment(name, { env: {} })).toBe(expected);
  });

  it('has the reference endpoints', () => {
    expect(AZURE_US_GOVERNMENT_CLOUD).toMatchObject({ activeDirectoryEndpoint: 'https://login.microsoftonline.us', microsoftGraphEndpoint: 'https://graph.microsoft.us', resourceManagerEndpoint: 'https://management.usgovcloudapi.net' });
    expect(AZURE_CHINA_CLOUD).toMatchObject({ activeDirectoryEndpoint: 'https://login.chinacloudapi.cn', microsoftGraphEndpoint: 'https://microsoftgraph.chinacloudapi.cn', resourceManagerEndpoint: 'https://management.chinacloudapi.cn' });
    expect(scopeFor(AZURE_PUBLIC_CLOUD.microsoftGraphEndpoint)).toBe('https://graph.microsoft.com/.default');
  });

  it('uses the custom file when the name matches, trimming trailing slashes', () => {
    expect(resolveEnvironment('Local', withFile(custom))).toEqual({ ...custom, activeDirectoryEndpoint: 'https://127.0.0.1:8443', custom: true });
    // Built-in names still win over the file.
    expect(resolveEnvironment('AzurePublicCloud', withFile({ ...custom, name: 'AzurePublicCloud' }))).toBe(AZURE_PUBLIC_CLOUD);
  });

  it.each([
    ['AzureGermanCloud', {}, /^environment: no cloud configuration matching the name "AzureGermanCloud"/],
    ['Other', withFile(custom), /^environment: no cloud configuration matching the name "Other"/],
    ['Local', withFile('{not json'), /CLOUD_ENVIRONMENT_FILEPATH: cannot read/],
    ['Local', withFile({ ...custom, microsoftGraphEndpoint: 'http://127.0.0.1:1' }), /field "microsoftGraphEndpoint" must be an https URL/],
    ['Local', withFile({ name: 'Local' }), /field "activeDirectoryEndpoint"/],
  ])('%s is a 400 input error', (name, opts, message) => {
    let err: unknown;
    try {
      resolveEnvironment(name, { env: {}, ...opts });
    } catch (e) {
      err = e;
    }
    expect((err as { status: number }).status).toBe(400);
    expect((err as Error).message).toMatch(message);
  });
});

describe('credential selection and cache key', () => {
  it('secret, then assertion, then managed identity', () => {
    expect(selectCredentialKind({ clientId: 'a', clientSecret: 's', getAssertion: async () => 'x' })).toBe('client-secret');
    expect(selectCredentialKind({ clientId: 'a', getAssertion: async () => 'x' })).toBe('client-assertion');
    expect(selectCredentialKind({ clientId: 'a' })).toBe('managed-identity');
  });

  it('the cache key changes with any field, the secret included, and with the environment', () => {
    const base = { tenantId: 't', subscriptionId: 's', clientId: 'c', clientSecret: 'x' };
    const k = configKey(base, AZURE_PUBLIC_CLOUD);
    expect(configKey({ ...base }, AZURE_PUBLIC_CLOUD)).toBe(k);
    expect(configKey({ ...base, clientSecret: 'y' }, AZURE_PUBLIC_CLOUD)).not.toBe(k);
    expect(configKey(base, AZURE_CHINA_CLOUD)).not.toBe(k);
    expect(k).not.toContain('x');
  });
});
