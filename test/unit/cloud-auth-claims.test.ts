// Claim parsing and resource-claim comparisons of the cloud auth method.
import { describe, expect, it } from 'vitest';
import { hostResourceClaim, isScaleSetInstance, parseClaims, sameResourceId, vmId } from '../../src/auth/cloud/claims.ts';

const SUB = '11111111-2222-3333-4444-555555555555';
const P = { subscriptionId: SUB, resourceGroup: 'rg-app' };
const compute = (type: string, name: string, rg = 'rg-app') => `/subscriptions/${SUB}/resourceGroups/${rg}/providers/Microsoft.Compute/${type}/${name}`;

describe('parseClaims', () => {
  it('reads oid, appid, groups and the xms resource claims', () => {
    const c = parseClaims({ oid: 'o', appid: 'a', groups: ['g1', ''], xms_mirid: 'm', xms_az_rid: 'r' });
    expect(c).toEqual({ oid: 'o', appid: 'a', groups: ['g1'], groupsOverage: false, xmsMirid: 'm', xmsAzRid: 'r' });
  });

  it.each([
    ['no oid', {}, /no object id/],
    ['a non-string oid', { oid: 42 }, /"oid" is not a string/],
    ['groups that are not a list of strings', { oid: 'o', groups: 'g1' }, /"groups" is not a list/],
    ['a non-string xms_mirid', { oid: 'o', xms_mirid: ['x'] }, /"xms_mirid" is not a string/],
  ])('%s is a 403', (_name, payload, message) => {
    expect(() => parseClaims(payload)).toThrow(message);
  });

  it('notices a group overage reference', () => {
    expect(parseClaims({ oid: 'o', _claim_names: { groups: 'src1' } }).groupsOverage).toBe(true);
  });
});

describe('hostResourceClaim', () => {
  it('prefers xms_az_rid (user-assigned: the host) over xms_mirid (the identity)', () => {
    expect(hostResourceClaim(parseClaims({ oid: 'o', xms_mirid: 'uai', xms_az_rid: 'vm' }))).toBe('vm');
    expect(hostResourceClaim(parseClaims({ oid: 'o', xms_mirid: 'vm' }))).toBe('vm');
  });
});

describe('resource id comparisons', () => {
  it('compare whole ids case-insensitively: "web" is not "web01", "rg" is not "rg-app"', () => {
    expect(sameResourceId(compute('virtualMachines', 'WEB01').toLowerCase(), vmId(P, 'web01'))).toBe(true);
    expect(sameResourceId(compute('virtualMachines', 'web01'), vmId(P, 'web'))).toBe(false);
    expect(sameResourceId(compute('virtualMachines', 'web01', 'rg-app'), vmId({ ...P, resourceGroup: 'rg' }, 'web01'))).toBe(false);
  });

  it.each([
    ['the uniform scale set itself', compute('virtualMachineScaleSets', 'pool'), true],
    ['a uniform instance', `${compute('virtualMachineScaleSets', 'pool')}/virtualMachines/7`, true],
    ['a flexible instance pool_<id>', compute('virtualMachines', 'pool_ab12'), true],
    ['a scale set whose name extends it', compute('virtualMachineScaleSets', 'pool2'), false],
    ['a flexible instance of pool2', compute('virtualMachines', 'pool2_ab12'), false],
    ['"pool_" with no instance id', compute('virtualMachines', 'pool_'), false],
    ['an instance in another resource group', compute('virtualMachines', 'pool_ab12', 'rg-other'), false],
    ['a nested path below an instance', `${compute('virtualMachineScaleSets', 'pool')}/virtualMachines/7/extra`, false],
  ])('scale set "pool" vs %s', (_name, claim, expected) => {
    expect(isScaleSetInstance(claim, P, 'pool')).toBe(expected);
  });
});
