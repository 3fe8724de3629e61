// The emulator's IMDS token endpoint (test/support/azure-emulator/imds.ts), which `npm run emulator` serves for its
// seeded VM so the cloud auth method can be tried locally: tokens as Azure issues them to a VM, and the refusals IMDS
// gives a request without its header, version or a known resource.
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { EmulatedResource, UserAssignedIdentity } from '../support/azure-emulator/arm-compute.ts';
import { IMDS_TOKEN_PATH, registerImds, type ImdsHost } from '../support/azure-emulator/imds.ts';
import { seedTenant } from '../support/azure-emulator/seed.ts';
import { startEmulator, type Emulator } from '../support/azure-emulator/server.ts';

const RESOURCE = 'https://management.azure.com/';
let emu: Emulator;
let host: ImdsHost | undefined;
let vm: EmulatedResource;
let own: UserAssignedIdentity;
let foreign: UserAssignedIdentity;

beforeAll(async () => {
  emu = await startEmulator({ extraResources: [{ uri: RESOURCE, service: 'arm' }], extensions: [(routers) => registerImds(routers.login, () => host)] });
  const { subscriptionId } = seedTenant(emu.state);
  const place = { subscriptionId, resourceGroup: 'web-rg' };
  own = emu.compute.addUserAssignedIdentity({ ...place, name: 'web-id' });
  foreign = emu.compute.addUserAssignedIdentity({ ...place, name: 'other-id' });
  vm = emu.compute.addVirtualMachine({ ...place, name: 'web01', userAssigned: [own] });
});
afterAll(() => emu?.close());

async function imds(query: Record<string, string>, headers: Record<string, string> = { Metadata: 'true' }): Promise<{ status: number; body: any }> {
  const res = await fetch(`${emu.url}${IMDS_TOKEN_PATH}?${new URLSearchParams(query)}`, { headers });
  return { status: res.status, body: await res.json() };
}
const ok = { 'api-version': '2018-02-01', resource: RESOURCE };

describe('GET /metadata/identity/oauth2/token', () => {
  it('"an emulator that runs on no VM has no identity to give"', async () => {
    host = undefined;
    const res = await imds(ok);
    expect(res.status).toBe(400);
    expect(res.body.error_description).toMatch(/runs on no VM/);
  });

  it('"the VM\'s system-assigned identity gets a v1 token naming the VM, for the resource asked"', async () => {
    host = { vm, miTokens: emu.miTokens, tokens: emu.tokens, state: emu.state };
    const { status, body } = await imds(ok);
    expect(status).toBe(200);
    expect(body).toMatchObject({ token_type: 'Bearer', resource: RESOURCE, client_id: vm.systemIdentity!.clientId, expires_in: '86400' });
    const claims = decodeJwt(body.access_token);
    expect(claims).toMatchObject({
      iss: `https://sts.windows.net/${emu.tenantId}/`, aud: RESOURCE, tid: emu.tenantId, oid: vm.systemIdentity!.principalId, xms_mirid: vm.id,
    });
    expect(claims).not.toHaveProperty('xms_az_rid');
    expect(String(claims.exp)).toBe(body.expires_on);
  });

  it('"a user-assigned identity of the VM, named by client_id, object_id or mi_res_id, gets its own token"', async () => {
    const queries: Array<Record<string, string>> = [{ client_id: own.identity.clientId }, { object_id: own.identity.principalId }, { mi_res_id: own.id.toUpperCase() }];
    for (const query of queries) {
      const res = await imds({ ...ok, ...query });
      expect(res.status, JSON.stringify(query)).toBe(200);
      expect(decodeJwt(res.body.access_token)).toMatchObject({ oid: own.identity.principalId, xms_mirid: own.id, xms_az_rid: vm.id });
    }
  });

  // The identities exist only once beforeAll ran: each row builds its request then.
  const refused: Array<[string, () => Record<string, string>, Record<string, string> | undefined, RegExp]> = [
    ['no Metadata header', () => ok, {}, /metadata header/],
    ['Metadata: false', () => ok, { Metadata: 'false' }, /metadata header/],
    ['another api-version', () => ({ ...ok, 'api-version': '2019-08-01' }), undefined, /api-version/],
    ['no resource', () => ({ 'api-version': '2018-02-01' }), undefined, /audience/],
    ['a resource the tenant does not know', () => ({ ...ok, resource: 'https://vault.example.com/' }), undefined, /was not found in the tenant/],
    ['an identity not on the VM, by client_id', () => ({ ...ok, client_id: foreign.identity.clientId }), undefined, /Identity not found/],
    ['an identity not on the VM, by mi_res_id', () => ({ ...ok, mi_res_id: foreign.id }), undefined, /Identity not found/],
  ];
  it.each(refused)('"a request IMDS refuses gets a 400 and no token": %s', async (_name, query, headers, message) => {
    host = { vm, miTokens: emu.miTokens, tokens: emu.tokens, state: emu.state };
    const res = await imds(query(), headers);
    expect(res.status).toBe(400);
    expect(res.body.error_description).toMatch(message);
    expect(res.body).not.toHaveProperty('access_token');
  });
});
