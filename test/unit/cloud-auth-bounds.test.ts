// Bound matching and role validation of the cloud auth method, table-driven.
import { describe, expect, it } from 'vitest';
import { BOUND_FIELDS, checkPlacementBounds, checkPrincipalBounds, normaliseBoundList, validateRoleBounds, type RoleBounds } from '../../src/auth/cloud/bounds.ts';

const bounds = (b: Partial<RoleBounds>): RoleBounds => ({ ...(Object.fromEntries(BOUND_FIELDS.map((f) => [f, []])) as unknown as RoleBounds), ...b });
const OID = '6a1f0c1e-2b3c-4d5e-8f90-a1b2c3d4e5f6';

describe('validateRoleBounds', () => {
  it.each([
    ['no bound at all', {}, /at least one bound constraint/],
    ['only wildcards and nothing verified with ARM', { bound_service_principal_ids: ['*'], bound_group_ids: ['*'] }, /specific bound_service_principal_ids or bound_group_ids/],
    ['"*" mixed with values', { bound_group_ids: ['*', 'g1'] }, /'\*' must be the only value/],
    ['"*" in a resource bound', { bound_resource_groups: ['*'] }, /only allowed in bound_service_principal_ids/],
  ])('"%s" is a 400', (_name, b, message) => {
    expect(() => validateRoleBounds(bounds(b))).toThrow(message);
  });

  it.each([
    ['a specific principal', { bound_service_principal_ids: [OID] }],
    ['a specific group with a wildcard principal', { bound_service_principal_ids: ['*'], bound_group_ids: ['g1'] }],
    ['resource bounds only (verified with ARM)', { bound_resource_groups: ['rg'] }],
  ])('accepts %s', (_name, b) => {
    expect(() => validateRoleBounds(bounds(b))).not.toThrow();
  });
});

describe('checkPrincipalBounds', () => {
  const claims = (c: Partial<{ oid: string; groups: string[]; groupsOverage: boolean }> = {}) => ({ oid: OID, groups: [], groupsOverage: false, ...c });

  it('matches object ids exactly, case-insensitively, never as substrings', () => {
    expect(() => checkPrincipalBounds(bounds({ bound_service_principal_ids: [OID.toUpperCase()] }), claims())).not.toThrow();
    expect(() => checkPrincipalBounds(bounds({ bound_service_principal_ids: [OID.slice(0, 8)] }), claims())).toThrow(/service principal not authorized/);
    expect(() => checkPrincipalBounds(bounds({ bound_service_principal_ids: [`${OID}0`] }), claims())).toThrow(/service principal not authorized/);
  });

  it('"*" alone admits any principal; groups need one common value; both lists apply together (AND)', () => {
    expect(() => checkPrincipalBounds(bounds({ bound_service_principal_ids: ['*'] }), claims())).not.toThrow();
    expect(() => checkPrincipalBounds(bounds({ bound_group_ids: ['g1', 'g2'] }), claims({ groups: ['g0', 'g2'] }))).not.toThrow();
    expect(() => checkPrincipalBounds(bounds({ bound_group_ids: ['g1'] }), claims({ groups: ['g10'] }))).toThrow(/groups not authorized/);
    expect(() => checkPrincipalBounds(bounds({ bound_service_principal_ids: [OID], bound_group_ids: ['g1'] }), claims({ groups: [] }))).toThrow(/groups not authorized/);
  });

  it('a group overage reference is refused with its own reason, and no message carries a claim value', () => {
    expect(() => checkPrincipalBounds(bounds({ bound_group_ids: ['g1'] }), claims({ groupsOverage: true }))).toThrow(/overage/);
    let thrown: (Error & { status?: number }) | undefined;
    try {
      checkPrincipalBounds(bounds({ bound_service_principal_ids: ['someone'] }), claims());
    } catch (err) {
      thrown = err as Error & { status?: number };
    }
    expect(thrown?.status).toBe(403);
    expect(thrown?.message).not.toContain(OID);
  });
});

describe('checkPlacementBounds', () => {
  const placement = { subscriptionId: 'S1', resourceGroup: 'rg-prod', location: 'eastus', scaleSet: undefined as string | undefined };
  it.each([
    ['subscription', { bound_subscription_ids: ['s2'] }, placement, /subscription not authorized/],
    ['resource group prefix', { bound_resource_groups: ['rg'] }, placement, /resource group not authorized/],
    ['location', { bound_locations: ['westus'] }, placement, /location not authorized/],
    ['unknown location', { bound_locations: ['eastus'] }, { ...placement, location: '' }, /location is unknown/],
    ['scale set without vmss login', { bound_scale_sets: ['pool'] }, placement, /log in with vmss_name/],
    ['scale set name prefix', { bound_scale_sets: ['pool'] }, { ...placement, scaleSet: 'pool2' }, /scale set not authorized/],
  ])('%s mismatch is a 403', (_name, b, p, message) => {
    expect(() => checkPlacementBounds(bounds(b), p)).toThrow(message);
  });

  it('accepts case-insensitive exact matches', () => {
    expect(() => checkPlacementBounds(bounds({ bound_subscription_ids: ['s1'], bound_resource_groups: ['RG-PROD'], bound_locations: ['EastUS'] }), placement)).not.toThrow();
  });
});

describe('normaliseBoundList', () => {
  it('trims, drops empty entries and case-insensitive duplicates', () => {
    expect(normaliseBoundList([' a ', '', 'A', 'b'])).toEqual(['a', 'b']);
  });
});
