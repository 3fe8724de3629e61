// Renewal of cloud-login tokens against the role as stored now, table-driven (finding 9).
import { describe, expect, it } from 'vitest';
import { BOUND_FIELDS, type RoleBounds } from '../../src/auth/cloud/bounds.ts';
import { renewLogin } from '../../src/auth/cloud/login.ts';
import type { CloudAuthRole } from '../../src/auth/cloud/roles.ts';
import type { TokenView } from '../../src/core/framework.ts';
import type { StorageView } from '../../src/core/storage/view.ts';
import { DEFAULT_TOKEN_SETTINGS } from '../../src/core/token-fields.ts';

const OID = '6a1f0c1e-2b3c-4d5e-8f90-a1b2c3d4e5f6';

const role = (r: Partial<CloudAuthRole>): CloudAuthRole => ({
  ...(Object.fromEntries(BOUND_FIELDS.map((f) => [f, []])) as unknown as RoleBounds),
  ...DEFAULT_TOKEN_SETTINGS, bound_service_principal_ids: [OID], token_policies: ['app'], ...r,
});

/** Storage holding one role, "ci", or none. */
const storageWith = (stored: CloudAuthRole | undefined): StorageView => ({
  getJson: async (key: string, parse: (raw: unknown) => unknown) => (key === 'role/ci' && stored ? parse(JSON.parse(JSON.stringify(stored))) : undefined),
}) as unknown as StorageView;

const token = (policies: string[]): TokenView => ({
  accessor: 'a', entityId: 'e', policies, metadata: {}, issueTime: 0, internal: { role: 'ci', oid: OID, groups: [] },
});

describe('renewLogin', () => {
  it.each([
    ['the policies the role grants, default added', role({}), ['app', 'default']],
    ['the same policies stored in another order', role({ token_policies: ['b', 'a'] }), ['a', 'b', 'default']],
    ['no default when the role says token_no_default_policy', role({ token_no_default_policy: true }), ['app']],
  ])('"renewal keeps a token whose policies the role still grants": %s', async (_name, stored, policies) => {
    await expect(renewLogin(storageWith(stored), token(policies))).resolves.toMatchObject({ ttl: 0 });
  });

  it.each([
    ['a policy removed from the role', role({ token_policies: [] }), ['app', 'default'], /policies have changed.*log in again/],
    ['a policy added to the role', role({ token_policies: ['app', 'more'] }), ['app', 'default'], /policies have changed/],
    ['default dropped by token_no_default_policy', role({ token_no_default_policy: true }), ['app', 'default'], /policies have changed/],
    ['default added back', role({}), ['app'], /policies have changed/],
    ['the role deleted', undefined, ['app', 'default'], /no longer exists/],
    ['a root token from a role stored before reserved policies were refused', role({ token_policies: ['root'] }), ['root'], /"root" policy, which no role may grant/],
  ])('"renewal is refused when the role no longer grants the token\'s policies": %s', async (_name, stored, policies, message) => {
    const refused = renewLogin(storageWith(stored), token(policies));
    await expect(refused).rejects.toMatchObject({ status: 403 });
    await expect(refused).rejects.toThrow(message);
  });
});
