// createCredential: which credential a config selects, checked when it is made although @azure/identity loads only
// at the first token.
import { describe, expect, it } from 'vitest';
import { createCredential } from '../../src/providers/azure/credentials.ts';
import { resolveEnvironment } from '../../src/providers/azure/environments.ts';

const environment = resolveEnvironment(undefined);
const base = { tenantId: '00000000-0000-0000-0000-000000000001', clientId: 'app', clientSecret: 'secret-value', environment };

describe('createCredential', () => {
  it('"a client secret, else a client assertion, else the managed identity"', () => {
    expect(createCredential(base).kind).toBe('client-secret');
    expect(createCredential({ ...base, clientSecret: undefined, getAssertion: async () => 'jwt' }).kind).toBe('client-assertion');
    expect(createCredential({ ...base, clientSecret: undefined, tenantId: '' }).kind).toBe('managed-identity');
  });

  it.each([
    ['a slash', 'tenant/../other'],
    ['a space', 'my tenant'],
    ['a query', 'tenant?x=1'],
    ['a colon', 'host:443'],
    ['a newline', 'tenant\nx'],
    ['an at sign', 'user@tenant'],
  ])('"a tenant_id the SDK would refuse is refused when the credential is made, not at its first token": %s', (_, tenantId) => {
    expect(() => createCredential({ ...base, tenantId })).toThrow(expect.objectContaining({ status: 400, message: expect.stringMatching(/^tenant_id/) }));
  });

  it('"a tenant id or a domain name is accepted"', () => {
    expect(createCredential({ ...base, tenantId: 'contoso.onmicrosoft.com' }).kind).toBe('client-secret');
    expect(createCredential({ ...base }).kind).toBe('client-secret');
  });

  it('"tenant_id and client_id are required with a client secret"', () => {
    expect(() => createCredential({ ...base, tenantId: '' })).toThrow(/tenant_id is required/);
    expect(() => createCredential({ ...base, clientId: undefined })).toThrow(/client_id is required with client_secret/);
  });
});
