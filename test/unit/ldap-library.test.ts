import { describe, expect, it } from 'vitest';
import type { CallerInfo } from '../../src/core/framework.ts';
import { checkoutTtl, isBorrower } from '../../src/engines/ldap/library-checkout.ts';
import type { Borrower } from '../../src/engines/ldap/library-store.ts';
import { mergeLibrarySet, validateLibrarySet } from '../../src/engines/ldap/library.ts';

const MOUNT_MAX = 1000;

describe('checkoutTtl', () => {
  it.each([
    // set ttl, requested, expected
    [3600, undefined, 3600],
    [3600, 600, 600],
    [3600, 7200, 3600],
    [3600, 0, 3600],
    [0, undefined, MOUNT_MAX],
    [0, 0, MOUNT_MAX],
    [0, 600, 600],
  ])('"the set\'s ttl caps the request; 0 is unlimited": set %s, requested %s → %s', (ttl, requested, expected) => {
    expect(checkoutTtl({ ttl }, requested, MOUNT_MAX)).toBe(expected);
  });
});

describe('validateLibrarySet', () => {
  const base = { service_account_names: ['svc0'], ttl: 60, max_ttl: 120, disable_check_in_enforcement: false, max_wait: 60, max_checkouts_per_entity: 0 };
  it.each([
    [{ service_account_names: [] }, 'at least one service account is required'],
    [{ service_account_names: ['svc0', ''] }, 'must not be empty'],
    [{ service_account_names: ['svc0', 'Svc0'] }, 'element 2 repeats an earlier one'],
    [{ ttl: 121 }, 'invalid value for field "max_ttl": 120s is shorter than ttl (121s)'],
  ])('"bad sets are refused naming the field": %j', (change, message) => {
    expect(() => validateLibrarySet({ ...base, ...change })).toThrow(message);
  });

  it.each([
    [{}],
    [{ ttl: 0 }],
    [{ ttl: 0, max_ttl: 0 }],
    [{ ttl: 500, max_ttl: 0 }],
    [{ ttl: 120 }],
  ])('"valid sets pass": %j', (change) => {
    expect(() => validateLibrarySet({ ...base, ...change })).not.toThrow();
  });
});

describe('mergeLibrarySet', () => {
  const req = (data: Record<string, unknown>) => ({ data, has: (k: string) => k in data }) as Parameters<typeof mergeLibrarySet>[1];
  it('"a new set starts from 24h/24h and enforcement on"', () => {
    expect(mergeLibrarySet(undefined, req({ service_account_names: ['a'] }))).toEqual({
      service_account_names: ['a'], ttl: 86400, max_ttl: 86400, disable_check_in_enforcement: false, max_wait: 60, max_checkouts_per_entity: 0,
    });
  });
  it('"an update changes only the sent keys"', () => {
    const existing = { service_account_names: ['a'], ttl: 10, max_ttl: 20, disable_check_in_enforcement: false, max_wait: 60, max_checkouts_per_entity: 0 };
    expect(mergeLibrarySet(existing, req({ ttl: 0 }))).toEqual({ ...existing, ttl: 0 });
  });
});

describe('isBorrower', () => {
  const borrower: Borrower = { entity_id: 'e1', accessor: 'a1', lease_id: 'l', set: 's', checked_out_at: 0 };
  const caller = (entityId: string, accessor: string): CallerInfo => ({ clientToken: 't', entityId, accessor, displayName: '', policies: [] });
  it.each([
    ['same entity, other token', caller('e1', 'a2'), true],
    ['same token', caller('', 'a1'), true],
    ['other entity and token', caller('e2', 'a2'), false],
    ['no entity on either side does not match', caller('', 'a2'), false],
  ])('"the borrowing entity or token": %s', (_label, who, expected) => {
    expect(isBorrower(borrower, who)).toBe(expected);
  });
  it('"an empty borrower entity never matches a caller without one"', () => {
    expect(isBorrower({ ...borrower, entity_id: '' }, caller('', 'a2'))).toBe(false);
  });
});
