import type { StorageCondition } from './storage/types.ts';
import type { PreparedWrite, StorageView } from './storage/view.ts';
import type { LeaseManager } from './leases.ts';
import { tokenLeaseId, type NewToken, type TokenEntry, type TokenStore } from './tokens.ts';

export interface IssuedToken {
  token: string;
  entry: TokenEntry;
  /** The envelope's `auth` block. */
  auth: Record<string, unknown>;
}

type Spec = Partial<NewToken> & Pick<NewToken, 'policies' | 'path' | 'displayName' | 'ttl' | 'parent' | 'renewable'> & {
  id?: string;
  /** Guards the token's commit must hold (a login's mount is not being disabled). */
  guards?: StorageCondition[];
  /** Writes, made for the new token, that land with it or not at all (a wrapping token's response). */
  alongside?: (entry: TokenEntry) => PreparedWrite[];
};

/** Creates a token and its expiry lease in one commit (tokens with ttl 0 never expire and get none). */
/** What issuing a token needs of the core (the core itself, passed narrowly so this module does not import it). */
export interface TokenIssuer {
  tokens: TokenStore;
  leases: LeaseManager;
  systemView: StorageView;
}

export async function issueToken(core: TokenIssuer, { guards = [], alongside, ...spec }: Spec): Promise<IssuedToken> {
  const { token, entry, write } = core.tokens.prepare({
    meta: {}, numUses: 0, explicitMaxTtl: 0, period: 0, entityId: '', boundCidrs: [], mountAccessor: '', internal: {}, ...spec,
  });
  const writes: PreparedWrite[] = [write, ...(alongside?.(entry) ?? [])];
  if (guards.length > 0) writes.push({ ops: [], conditions: guards, committed: () => {} });
  if (entry.ttl > 0) {
    const now = entry.creationTime;
    writes.push(core.leases.prepare({
      id: tokenLeaseId(entry), kind: 'token', mountPath: 'auth/token/', secretType: '', internal: {},
      issueTime: now, expireTime: now + entry.ttl * 1000, ttl: entry.ttl, maxTtl: entry.explicitMaxTtl, renewable: entry.renewable,
      tokenSalted: entry.salted,
    }).write);
  }
  await core.systemView.commit(writes);
  return { token, entry, auth: authBlock(token, entry) };
}

export function authBlock(token: string, entry: TokenEntry): Record<string, unknown> {
  const tokenPolicies = entry.policies;
  return {
    client_token: token,
    accessor: entry.accessor,
    policies: tokenPolicies,
    token_policies: tokenPolicies,
    metadata: Object.keys(entry.meta).length ? entry.meta : null,
    lease_duration: entry.ttl,
    renewable: entry.renewable,
    entity_id: entry.entityId,
    token_type: 'service',
    orphan: entry.parent === '',
    mfa_requirement: null,
    num_uses: entry.numUses,
  };
}
