import { Acl } from './policy/acl.ts';
import { DEFAULT_POLICY_HCL, RESPONSE_WRAPPING_POLICY_HCL, parseAclPolicy, type AclPolicy } from './policy/parse.ts';
import { DEFAULT_PASSWORD_POLICY, generatePassword, parsePasswordPolicy, type PasswordPolicy } from './policy/password-policy.ts';
import { setBounded } from './bounded-map.ts';
import { BadRequestError, NotFoundError } from './errors.ts';
import type { StorageView } from './storage/view.ts';

export const normalizePolicyName = (name: string): string => name.trim().toLowerCase();

/** A token's policy set as stored: canonical names, no repeats, sorted, `default` added unless asked not to (or root). */
export function normalizePolicies(policies: string[], addDefault: boolean): string[] {
  const set = new Set(policies.map(normalizePolicyName).filter(Boolean));
  if (addDefault && !set.has('root')) set.add('default');
  return [...set].sort();
}

/**
 * A policy name as it appears in a request path, made canonical before the ACL sees it (so a deny on
 * `sys/policies/acl/x` holds for `X` and `x%C2%A0`). Names that would still hold white space, control or
 * invisible format characters, or a slash, are refused: no spelling of one name may pass for another.
 */
export function canonicalPolicyName(raw: string): string {
  const name = normalizePolicyName(raw);
  if (name === '' || /[\p{Z}\p{C}\/]/u.test(name)) throw new BadRequestError('invalid policy name: it must not be empty or hold white space, control or format characters, or "/"');
  return name;
}

/**
 * ACL and password policies. Parsed ACL policies are cached by name (every request needs them); the cache is dropped
 * on any write here, so a policy change applies to the next request, and on another node's write when the cluster says
 * so (`invalidate`, within the coherence bound of docs/ha.md).
 */
export class PolicyStore {
  readonly #acl: StorageView;
  readonly #passwords: StorageView;
  readonly #parsed = new Map<string, AclPolicy | null>();
  readonly #acls = new Map<string, Acl>();
  /** Moves at every invalidation: a policy read that began before one is not cached after it. */
  #generation = 0;

  constructor(acl: StorageView, passwords: StorageView) {
    this.#acl = acl;
    this.#passwords = passwords;
  }

  /** Written only where absent: of nodes starting together, one writes it, and an operator's edit is kept. */
  async ensureDefault(): Promise<void> {
    if (await this.#acl.get('default')) return;
    await this.#acl.transaction([{ type: 'put', key: 'default', value: Buffer.from(JSON.stringify({ name: 'default', policy: DEFAULT_POLICY_HCL })) }], [{ key: 'default', expected: undefined }]);
  }

  async listAcl(): Promise<string[]> {
    return [...(await this.#acl.list()), 'root'].sort();
  }

  async readAcl(name: string): Promise<{ name: string; policy: string } | undefined> {
    return this.#acl.getJson(normalizePolicyName(name));
  }

  async writeAcl(rawName: string, text: string): Promise<void> {
    const name = normalizePolicyName(rawName);
    if (name === 'root' || name === 'response-wrapping') throw new BadRequestError(`cannot update "${name}" policy`);
    parseAclPolicy(name, text);
    await this.#acl.putJson(name, { name, policy: text });
    this.invalidate();
  }

  async deleteAcl(rawName: string): Promise<void> {
    const name = normalizePolicyName(rawName);
    if (name === 'default') throw new BadRequestError('cannot delete default policy');
    if (name === 'root' || name === 'response-wrapping') throw new BadRequestError(`cannot delete "${name}" policy`);
    await this.#acl.delete(name);
    this.invalidate();
  }

  async exists(name: string): Promise<boolean> {
    return name === 'root' || (await this.#acl.get(normalizePolicyName(name))) !== undefined;
  }

  /** ACLs by the policy list object of a cached token entry, with the generation they were built in. */
  readonly #byList = new WeakMap<readonly string[], { generation: number; acl: Acl }>();

  /**
   * The merged ACL of a policy set when it is built already, without a promise or a key to join: a request asks with
   * its token's cached entry, whose policy list is the same object every time. Undefined: ask `aclFor`.
   */
  builtAcl(policies: readonly string[]): Acl | undefined {
    const known = this.#byList.get(policies);
    if (known && known.generation === this.#generation) return known.acl;
    const acl = policies.includes('root') ? Acl.root() : this.#acls.get(policies.join('\n'));
    if (acl) this.#byList.set(policies, { generation: this.#generation, acl });
    return acl;
  }

  /** The merged ACL for a token's policy set; names that no longer exist simply grant nothing. */
  async aclFor(policies: string[]): Promise<Acl> {
    if (policies.includes('root')) return Acl.root();
    // Token policies are stored sorted (normalizePolicies), so the joined list is already a canonical key.
    const key = policies.join('\n');
    const cached = this.#acls.get(key);
    if (cached) return cached;
    const generation = this.#generation;
    const parsed: AclPolicy[] = [];
    for (const name of policies) {
      const policy = await this.#parsedPolicy(name, generation);
      if (policy) parsed.push(policy);
    }
    const acl = new Acl(parsed);
    if (generation === this.#generation) this.#acls.set(key, acl);
    return acl;
  }

  async #parsedPolicy(name: string, generation: number): Promise<AclPolicy | null> {
    if (this.#parsed.has(name)) return this.#parsed.get(name)!;
    const stored = name === 'response-wrapping' ? { policy: RESPONSE_WRAPPING_POLICY_HCL } : await this.readAcl(name);
    const policy = stored ? parseAclPolicy(name, stored.policy) : null;
    if (generation === this.#generation) this.#parsed.set(name, policy);
    return policy;
  }

  /** Drops every parsed policy and merged ACL (a policy changed, here or on another node). */
  invalidate(): void {
    this.#generation++;
    this.#parsed.clear();
    this.#acls.clear();
  }

  async listPassword(): Promise<string[]> {
    return this.#passwords.list();
  }

  async readPassword(name: string): Promise<string | undefined> {
    return (await this.#passwords.getJson<{ policy: string }>(name))?.policy;
  }

  async writePassword(name: string, text: string): Promise<void> {
    parsePasswordPolicy(text);
    await this.#passwords.putJson(name, { policy: text });
  }

  async deletePassword(name: string): Promise<void> {
    await this.#passwords.delete(name);
  }

  /** Engines' password source: the named policy, or the server default (64 of A–Z a–z 0–9). */
  async generate(policyName?: string): Promise<string> {
    if (!policyName) return generatePassword(DEFAULT_PASSWORD_POLICY);
    const text = await this.readPassword(policyName);
    if (text === undefined) throw new BadRequestError(`password policy "${policyName}" does not exist`);
    return generatePassword(this.#parsedPassword(text));
  }

  async generateOrNotFound(name: string): Promise<string> {
    const text = await this.readPassword(name);
    if (text === undefined) throw new NotFoundError('policy does not exist');
    return generatePassword(this.#parsedPassword(text));
  }

  /** Parsed by text, so an edited policy is parsed afresh and a rotation does not parse HCL every time. */
  readonly #parsedPasswords = new Map<string, PasswordPolicy>();

  #parsedPassword(text: string): PasswordPolicy {
    let policy = this.#parsedPasswords.get(text);
    if (!policy) {
      policy = parsePasswordPolicy(text);
      setBounded(this.#parsedPasswords, 256, text, policy);
    }
    return policy;
  }
}
