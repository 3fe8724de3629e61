import { createHash, randomUUID } from 'node:crypto';
import { ConflictError } from './errors.ts';
import { KeyedLock } from './keyed-lock.ts';
import type { StorageView } from './storage/view.ts';

/**
 * Entities tie the tokens of one workload together across logins: one entity per (auth mount accessor,
 * alias name). The LDAP library uses the entity id for check-in enforcement.
 */
export interface Entity {
  id: string;
  name: string;
  aliases: Array<{ mountAccessor: string; name: string; metadata: Record<string, string> }>;
  groupIds: string[];
}

const hash = (s: string) => createHash('sha256').update(s).digest('hex').slice(0, 40);
const groupAliasKey = (mountAccessor: string, name: string) => `group-alias/${mountAccessor}/${hash(name)}`;

function sameStrings(a: Record<string, string>, b: Record<string, string>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => Object.hasOwn(b, k) && a[k] === b[k]);
}

export class IdentityStore {
  readonly #view: StorageView;
  readonly #locks = new KeyedLock();

  constructor(view: StorageView) {
    this.#view = view;
  }

  async entity(id: string): Promise<Entity | undefined> {
    return this.#view.getJson<Entity>(`entity/${id}`);
  }

  /**
   * Finds or creates the entity for an alias; serialised per alias so concurrent logins share one entity. Across
   * nodes the alias's write is a compare-and-set on what it read: of two nodes creating the entity of one alias at
   * once, one does, and the other goes again and finds it.
   */
  async upsertAlias(mountAccessor: string, name: string, metadata: Record<string, string>, groups: string[]): Promise<Entity> {
    const aliasKey = `alias/${mountAccessor}/${hash(name)}`;
    // A repeat login usually changes nothing. Answering it from storage, without the lock and a rewrite,
    // keeps one workload's concurrent logins from queueing behind each other's commits (one per fsync).
    const unchanged = await this.#unchanged(aliasKey, mountAccessor, name, metadata, groups);
    if (unchanged) return unchanged;
    return this.#locks.run(aliasKey, async () => {
      const groupIds: string[] = [];
      for (const g of groups) groupIds.push(await this.#groupAlias(mountAccessor, g));
      for (let attempt = 0; ; attempt++) {
        const existingRaw = await this.#view.get(aliasKey);
        const existing = existingRaw ? await this.entity(existingRaw.toString()) : undefined;
        const entity: Entity = existing
          ? { ...existing, aliases: existing.aliases.map((a) => (a.mountAccessor === mountAccessor && a.name === name ? { ...a, metadata } : a)), groupIds }
          : { id: randomUUID(), name: `entity_${randomUUID().slice(0, 8)}`, aliases: [{ mountAccessor, name, metadata }], groupIds };
        const applied = await this.#view.transaction([
          { type: 'put', key: `entity/${entity.id}`, value: Buffer.from(JSON.stringify(entity)) },
          { type: 'put', key: aliasKey, value: Buffer.from(entity.id) },
        ], [{ key: aliasKey, expected: existingRaw }]);
        if (applied) return entity;
        if (attempt === 3) throw new ConflictError('the identity of this login kept changing while it was recorded; log in again');
      }
    });
  }

  /** The stored entity when writing this alias again would store exactly what is there already. */
  async #unchanged(aliasKey: string, mountAccessor: string, name: string, metadata: Record<string, string>, groups: string[]): Promise<Entity | undefined> {
    const id = (await this.#view.get(aliasKey))?.toString();
    const existing = id ? await this.entity(id) : undefined;
    const alias = existing?.aliases.find((a) => a.mountAccessor === mountAccessor && a.name === name);
    if (!existing || !alias || !sameStrings(alias.metadata, metadata) || existing.groupIds.length !== groups.length) return undefined;
    for (const [i, g] of groups.entries()) {
      if ((await this.#view.get(groupAliasKey(mountAccessor, g)))?.toString() !== existing.groupIds[i]) return undefined;
    }
    return existing;
  }

  async #groupAlias(mountAccessor: string, name: string): Promise<string> {
    const key = groupAliasKey(mountAccessor, name);
    const existing = (await this.#view.get(key))?.toString();
    if (existing) return existing;
    const id = randomUUID();
    const created = await this.#view.transaction([
      { type: 'put', key, value: Buffer.from(id) },
      { type: 'put', key: `group/${id}`, value: Buffer.from(JSON.stringify({ id, name, mountAccessor })) },
    ], [{ key, expected: undefined }]);
    // Another node made it first: that one is everyone's.
    return created ? id : (await this.#view.get(key))!.toString();
  }

}
