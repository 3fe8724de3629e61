import { BadRequestError, PermissionDeniedError } from '../errors.ts';

/**
 * Policies no auth method, role or token role may hand out: `root` grants everything, and
 * `response-wrapping` belongs to wrapping tokens. Only the root-token generation path and a root parent
 * creating a token (auth/token/create) attach `root`.
 */
export const RESERVED_POLICIES: ReadonlySet<string> = new Set(['root', 'response-wrapping']);

/** Names a reserved policy in a list, after the same trim and lower-casing policy names get everywhere. */
export function reservedPolicyIn(policies: readonly string[]): string | undefined {
  return policies.map((p) => p.trim().toLowerCase()).find((p) => RESERVED_POLICIES.has(p));
}

/** Role writes: a reserved policy is a 400 naming the field. */
export function refuseReservedPolicies(fieldName: string, policies: readonly string[]): void {
  const reserved = reservedPolicyIn(policies);
  if (reserved) throw new BadRequestError(`invalid value for field "${fieldName}": the "${reserved}" policy cannot be assigned by a role`);
}

/** Token issue for a login: the last line of defence if a stored role predates the write-time check. */
export function refuseReservedAtIssue(policies: readonly string[]): void {
  const reserved = reservedPolicyIn(policies);
  if (reserved) throw new PermissionDeniedError(`permission denied: auth methods cannot create tokens with the "${reserved}" policy`);
}
