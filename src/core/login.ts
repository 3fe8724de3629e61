import type { Logger } from 'pino';
import type { DisableMarks } from './disable-marks.ts';
import { PermissionDeniedError } from './errors.ts';
import type { BackendResponse } from './framework.ts';
import type { IdentityStore } from './identity.ts';
import { minPositive, type LeaseManager } from './leases.ts';
import type { CoreTelemetry } from './metrics.ts';
import type { MountLifecycle } from './mount-lifecycle.ts';
import type { Mounted } from './mounted.ts';
import type { MountTable } from './mounts.ts';
import { normalizePolicies } from './policy-store.ts';
import { refuseReservedAtIssue } from './policy/reserved.ts';
import type { StorageView } from './storage/view.ts';
import { issueToken, type IssuedToken } from './token-issue.ts';
import { tokenLeaseId, type TokenEntry, type TokenStore } from './tokens.ts';

/**
 * Tokens issued and ended by the core: the token a login earns (identity resolved, TTLs clamped by the mount), the
 * root token, a token's uses counted down, and the revocation of a token with its descendants and their leases.
 */
export class Login {
  declare readonly tokens: TokenStore;
  declare readonly leases: LeaseManager;
  declare readonly systemView: StorageView;
  declare readonly identity: Pick<IdentityStore, 'upsertAlias'>;
  declare readonly mounts: Pick<MountTable, 'get'>;
  declare readonly mountTable: Pick<MountLifecycle, 'effectiveTtls'>;
  declare readonly marks: Pick<DisableMarks, 'notDisabling'>;
  declare readonly logger: Logger;
  declare readonly telemetry: CoreTelemetry | undefined;

  constructor(deps: Pick<Login, 'tokens' | 'leases' | 'systemView' | 'identity' | 'mounts' | 'mountTable' | 'marks' | 'logger' | 'telemetry'>) {
    Object.assign(this, deps);
  }

  async createRootToken(id?: string): Promise<IssuedToken> {
    return issueToken(this, { id, policies: ['root'], path: 'auth/token/root', displayName: 'root', ttl: 0, parent: '', renewable: false, mountAccessor: this.mounts.get('auth/token/')?.accessor ?? '' });
  }

  /** A login answered by an auth method: resolve identity, clamp TTLs by the mount, issue the token. */
  async login(spec: NonNullable<BackendResponse['auth']>, mounted: Mounted, path: string): Promise<Record<string, unknown>> {
    const ttls = this.mountTable.effectiveTtls(mounted.entry);
    let entityId = '';
    if (spec.alias) entityId = (await this.identity.upsertAlias(mounted.entry.accessor, spec.alias.name, spec.alias.metadata ?? {}, spec.groupAliases ?? [])).id;
    const base = mounted.entry.path.replace(/^auth\//, '').replace(/\/$/, '').replace(/\//g, '-');
    const displayName = `${base}-${spec.displayName}`.replace(/-+$/, '');
    const policies = normalizePolicies(spec.policies, !spec.noDefaultPolicy);
    refuseReservedAtIssue(policies);
    const max = minPositive(ttls.max, spec.maxTtl);
    let ttl = spec.period ? spec.period : spec.ttl > 0 ? spec.ttl : ttls.default;
    if (max > 0) ttl = Math.min(ttl, max);
    const issued = await issueToken(this, {
      policies, path, displayName, ttl, explicitMaxTtl: spec.maxTtl, period: spec.period ?? 0, numUses: spec.numUses ?? 0,
      parent: '', renewable: spec.renewable ?? true, entityId, meta: spec.metadata, boundCidrs: spec.boundCidrs ?? [],
      mountAccessor: mounted.entry.accessor, internal: spec.internal ?? {}, guards: [this.marks.notDisabling(mounted.entry.path)],
    });
    this.telemetry?.tokenCreated(mounted.entry, issued.entry.ttl);
    return issued.auth;
  }

  async useOnce(token: TokenEntry): Promise<void> {
    // Counted by compare-and-set: two requests (on two nodes) never spend the same use.
    const left = await this.tokens.useOnce(token.salted);
    if (left === undefined) throw new PermissionDeniedError();
    // Last use: the request proceeds, the token dies right after it.
    if (left === 0) setImmediate(() => void this.revokeTokenTree(token.salted).catch((err) => this.logger.error({ err }, 'revoking a used-up token failed')));
  }

  /**
   * Revokes a token, its descendants (leaves first) and every lease issued with them. Atomic from the caller's
   * view: the mark comes first (the tree is refused from then on and nothing new can attach to it), then the
   * children and leases, then a re-check that the mark kept anything from joining.
   */
  async revokeTokenTree(salted: string, seen = new Set<string>()): Promise<void> {
    if (seen.has(salted)) return;
    seen.add(salted);
    const entry = await this.tokens.lookupSalted(salted);
    if (entry) await this.tokens.markRevoking(entry);
    const tried = new Set<string>();
    for (let round = 0; ; round++) {
      const children = (await this.tokens.children(salted)).filter((c) => !seen.has(c));
      const leases = (await this.leases.idsByToken(salted)).filter((id) => !tried.has(id));
      if (children.length === 0 && leases.length === 0) break;
      if (round === 2) throw new Error(`revoking a token: ${children.length} children and ${leases.length} leases appeared after it was marked`);
      for (const child of children) await this.revokeTokenTree(child, seen);
      await this.leases.revokeByToken(salted, tried);
    }
    if (!entry) return;
    await this.tokens.remove(entry);
    await this.leases.forget(tokenLeaseId(entry));
  }
}
