import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import nodeVault from 'node-vault';
import { startTestServer, type TestServer } from '../support/server.ts';

let s: TestServer;
beforeAll(async () => {
  s = await startTestServer({ listen: true });
});
afterAll(() => s.close());

describe('an unmodified Vault client (node-vault) drives the server', () => {
  it('"writes and reads a policy, creates a token, lists mounts with LIST, revokes"', async () => {
    const vault = nodeVault({ endpoint: s.url, token: 'root', apiVersion: 'v1' });
    await vault.addPolicy({ name: 'ci', rules: 'path "sys/mounts" { capabilities = ["read"] }' });
    const policy = await vault.getPolicy({ name: 'ci' });
    expect(policy.rules ?? policy.data?.rules).toMatch(/sys\/mounts/);
    // node-vault switches a client to the token it creates (tokenSource), as the real Vault client does.
    const creator = nodeVault({ endpoint: s.url, token: 'root', apiVersion: 'v1' });
    const created = await creator.tokenCreate({ policies: ['ci'], ttl: '1h' });
    const token = created.auth.client_token as string;
    expect(creator.token).toBe(token);
    const listed = await vault.list('sys/policies/acl');
    expect(listed.data.keys).toContain('ci');
    const asCi = nodeVault({ endpoint: s.url, token, apiVersion: 'v1' });
    const mounts = await asCi.mounts();
    expect(mounts.data['sys/'].type).toBe('system');
    await expect(asCi.list('sys/policies/acl')).rejects.toMatchObject({ response: { statusCode: 403 } });
    await vault.tokenRevoke({ token });
    await expect(asCi.mounts()).rejects.toMatchObject({ response: { statusCode: 403 } });
  });
});
