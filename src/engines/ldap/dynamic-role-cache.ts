/**
 * Dynamic roles as `creds/:role` uses them: the parsed role with its templates compiled, kept per role and keyed by
 * the bytes the role was read from (as static-cred-cache.ts does for static roles). A request still reads the role
 * from storage every time (the stored record is the truth: an update or a deletion on any node of a cluster is seen
 * by the next request, with nothing to invalidate); it parses the role, checks it against the schema and looks its
 * four templates up again only when those bytes changed. Each mount's engine holds its own cache.
 */
import { setBounded } from '../../core/bounded-map.ts';
import type { StorageView } from '../../core/storage/view.ts';
import type { Template } from '../../lib/gotemplate/index.ts';
import { dynamicRoleKey, parseDynamicRole, type DynamicRole } from './dynamic-roles.ts';
import { DEFAULT_USERNAME_TEMPLATE, type DynamicTemplates } from './dynamic-templates.ts';

/** Roles kept; past it the oldest go (a request then parses and compiles again, nothing else changes). */
const LIMIT = 1024;

export interface PreparedRole {
  role: DynamicRole;
  username: Template;
  creation: Template;
  deletion: Template;
  /** Absent when the role has no rollback LDIF. */
  rollback: Template | undefined;
}

export class DynamicRoleCache {
  readonly #templates: DynamicTemplates;
  readonly #entries = new Map<string, { raw: Buffer; prepared: PreparedRole }>();

  constructor(templates: DynamicTemplates) {
    this.#templates = templates;
  }

  /** Role `name` as stored now; undefined when there is no such role. A template that does not compile is a 400, every time. */
  async read(storage: StorageView, name: string): Promise<PreparedRole | undefined> {
    // Peeked (see Storage.peek): kept to compare and parse, never changed; the same bytes while the role is unchanged.
    const raw = await storage.peek(dynamicRoleKey(name));
    if (!raw) {
      this.#entries.delete(name);
      return undefined;
    }
    const entry = this.#entries.get(name);
    if (entry && (entry.raw === raw || entry.raw.equals(raw))) return entry.prepared;
    const prepared = this.#prepare(parseDynamicRole(raw));
    setBounded(this.#entries, LIMIT, name, { raw, prepared });
    return prepared;
  }

  #prepare(role: DynamicRole): PreparedRole {
    const t = this.#templates;
    return {
      role,
      username: t.username(role.username_template || DEFAULT_USERNAME_TEMPLATE),
      creation: t.ldif('creation_ldif', role.creation_ldif),
      deletion: t.ldif('deletion_ldif', role.deletion_ldif),
      rollback: role.rollback_ldif ? t.ldif('rollback_ldif', role.rollback_ldif) : undefined,
    };
  }
}
