import { z } from 'zod';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, lowerName } from '../../core/framework.ts';
import { jsonBytes, type PreparedWrite, type StorageView } from '../../core/storage/view.ts';
import type { LdifRecord } from '../../lib/ldif/index.ts';
import { isValidDn } from '../../providers/ldap/dn.ts';
import { refuseBindAccount, type AccountIdentity } from './accounts.ts';
import { configuredBindAccount, readConfig } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import {
  decodeLdifInput,
  DEFAULT_USERNAME_TEMPLATE,
  DynamicTemplates,
  LDIF_FIELDS,
  renderLdifTemplate,
  type LdifField,
  type LdifTemplateData,
} from './dynamic-templates.ts';

const dynamicRoleSchema = z.object({
  creation_ldif: z.string(),
  deletion_ldif: z.string(),
  rollback_ldif: z.string().default(''),
  /** Empty means the default template. */
  username_template: z.string().default(''),
  default_ttl: z.number().int().nonnegative().default(0),
  max_ttl: z.number().int().nonnegative().default(0),
});
export type DynamicRole = z.infer<typeof dynamicRoleSchema>;

/** Same grammar as Vault's role names: word characters at both ends, `-` `.` `/` inside. */
export const DYNAMIC_ROLE_NAME = String.raw`\w(?:[\w./-]*\w)?`;

export const dynamicRoleKey = (name: string) => `role/${name}`;
const roleKey = dynamicRoleKey;

/** Names are lower-cased on every path (Vault stores dynamic roles under the raw name and then cannot find them). */
export const roleName = (req: Pick<BackendRequest, 'params'>): string => req.params.name!.toLowerCase();

export async function readDynamicRole(storage: StorageView, name: string): Promise<DynamicRole | undefined> {
  return storage.getJson(roleKey(name), (raw) => dynamicRoleSchema.parse(raw));
}

/** A role from the bytes stored under its key. */
export function parseDynamicRole(raw: Buffer): DynamicRole {
  return dynamicRoleSchema.parse(JSON.parse(raw.toString('utf8')));
}

async function writeDynamicRole(storage: StorageView, name: string, role: DynamicRole, event: PreparedWrite): Promise<void> {
  await storage.commit([{ ops: storage.qualify([{ type: 'put', key: roleKey(name), value: jsonBytes(role) }]), committed: () => {} }, event]);
}

async function deleteDynamicRole(storage: StorageView, name: string, event: PreparedWrite): Promise<void> {
  await storage.commit([{ ops: storage.qualify([{ type: 'delete', key: roleKey(name) }]), committed: () => {} }, event]);
}

/** Direct children below a folder; sub-folders end in "/". */
async function listDynamicRoles(storage: StorageView, folder: string): Promise<string[]> {
  return storage.list(roleKey(folder));
}

/** Every role name, folders expanded. */
async function allDynamicRoleNames(storage: StorageView): Promise<string[]> {
  const prefix = roleKey('');
  return (await storage.listRecursive(prefix)).map((key) => key.slice(prefix.length));
}

const fields = {
  creation_ldif: field.string('Templated LDIF run in order to create the account, stopping at the first error. May be base64 encoded.'),
  deletion_ldif: field.string('Templated LDIF run when the lease ends, continuing past errors. May be base64 encoded.'),
  rollback_ldif: field.string('Templated LDIF run, continuing past errors, when creation_ldif fails. May be base64 encoded.'),
  username_template: field.string(`Template for the generated username (.DisplayName, .RoleName). Default ${DEFAULT_USERNAME_TEMPLATE}.`),
  default_ttl: field.duration('Lease TTL of issued credentials; 0 means the mount default.'),
  max_ttl: field.duration('Maximum lease life of issued credentials; 0 means the mount maximum. May not exceed the mount maximum.'),
};
type RoleFields = typeof fields;

/** What a template sees when a role is checked at write time (as in Vault); times are the write time. */
export function sampleLdifData(role: string, nowMs: number): LdifTemplateData {
  const expires = nowMs + 24 * 3600 * 1000;
  return {
    Username: 'testuser',
    Password: 'testpass',
    RoleName: role,
    DisplayName: 'testdisplayname',
    IssueTime: new Date(nowMs).toISOString(),
    IssueTimeSeconds: Math.floor(nowMs / 1000),
    ExpirationTime: new Date(expires).toISOString(),
    ExpirationTimeSeconds: Math.floor(expires / 1000),
  };
}

/**
 * Every record's DN must be a DN (one the engine cannot read, it cannot compare), and none may name the engine's
 * own bind account (accounts.ts, refuseBindAccount) when that is known. DNs are rendered, so this runs on the
 * sample at role write and again on the real data at each credential request, where a template such as
 * `cn={{.Username}}` may come out differently. `passed`, when given, holds the DNs already checked against the same
 * bind account, and gets those this call checks.
 */
export function checkRecordDns(field: LdifField, records: readonly LdifRecord[], bind: AccountIdentity | undefined, passed?: Set<string>): void {
  for (const record of records) {
    // The check is a function of the DN and the bind account alone: one that passed for another record passes again
    // (a credential request's LDIFs name the account's DN in each of its three templates).
    if (passed?.has(record.dn)) continue;
    const subject = `invalid value for field "${field}": the record at line ${record.line}`;
    if (!isValidDn(record.dn)) throw new BadRequestError(`${subject} has a DN that is not valid (RFC 4514)`);
    if (bind) refuseBindAccount(bind, { dn: record.dn }, subject);
    passed?.add(record.dn);
  }
}

/**
 * Cross-field rules of a whole role (after merging an update): both required LDIFs present, every
 * template parses and renders to valid LDIF with sample data whose DNs are not the bind account's
 * (`bind`, when a config exists), the username template renders, and the TTLs fit the mount.
 * Throws a 400 naming the field.
 */
export function validateDynamicRole(role: DynamicRole, ctx: { name: string; templates: DynamicTemplates; nowMs: number; mountMaxTtl: number; bind?: AccountIdentity }): void {
  const sample = sampleLdifData(ctx.name, ctx.nowMs);
  for (const name of LDIF_FIELDS) {
    const text = role[name];
    if (text === '') {
      if (name === 'rollback_ldif') continue;
      throw new BadRequestError(`missing required field "${name}"`);
    }
    checkRecordDns(name, renderLdifTemplate(name, ctx.templates.ldif(name, text), sample).records, ctx.bind);
  }
  const username = ctx.templates.username(role.username_template || DEFAULT_USERNAME_TEMPLATE);
  ctx.templates.renderUsername(username, { DisplayName: sample.DisplayName, RoleName: ctx.name });
  if (ctx.mountMaxTtl > 0 && role.max_ttl > ctx.mountMaxTtl) {
    throw new BadRequestError(`invalid value for field "max_ttl": ${role.max_ttl}s is longer than the mount's maximum lease TTL of ${ctx.mountMaxTtl}s`);
  }
  if (role.max_ttl > 0 && role.default_ttl > role.max_ttl) {
    throw new BadRequestError(`invalid value for field "default_ttl": ${role.default_ttl}s is longer than max_ttl (${role.max_ttl}s)`);
  }
}

/** Only the keys the client sent change; "" clears a key (an empty TTL is 0). LDIF is stored decoded. */
export function mergeDynamicRole(existing: DynamicRole | undefined, req: Pick<BackendRequest<RoleFields>, 'data' | 'has'>): DynamicRole {
  const role: DynamicRole = existing ? { ...existing } : dynamicRoleSchema.parse({ creation_ldif: '', deletion_ldif: '' });
  for (const name of LDIF_FIELDS) {
    if (req.has(name)) role[name] = decodeLdifInput(req.data[name] ?? '');
  }
  if (req.has('username_template')) role.username_template = req.data.username_template ?? '';
  if (req.has('default_ttl')) role.default_ttl = req.data.default_ttl ?? 0;
  if (req.has('max_ttl')) role.max_ttl = req.data.max_ttl ?? 0;
  return role;
}

export function dynamicRolesPart(engine: Pick<LdapEngine, 'ctx' | 'storage' | 'clock' | 'locks' | 'configDependents'>): LdapEnginePart {
  const { storage, clock, locks } = engine;
  const templates = new DynamicTemplates(() => clock.now());
  const lockKey = (name: string) => `role/${name}`;
  const roleEvent = (operation: 'create' | 'update' | 'delete', name: string) =>
    engine.ctx.system.event(`ldap/role-${operation}`, { modified: 'true', operation, path: `role/${name}`, name });
  // Outstanding leases need the config to delete their accounts, so roles keep it from being deleted.
  engine.configDependents.push({ what: 'dynamic roles', names: () => allDynamicRoleNames(storage) });

  const write = (req: BackendRequest<RoleFields>) =>
    locks.run(lockKey(roleName(req)), async () => {
      const name = roleName(req);
      const stored = await readDynamicRole(storage, name);
      const role = mergeDynamicRole(stored, req);
      // What the config alone says (a UPN bind's DN needs the directory): credential requests check the rest.
      const config = await readConfig(storage);
      const bind = config && configuredBindAccount(config);
      validateDynamicRole(role, { name, templates, nowMs: clock.now(), mountMaxTtl: engine.ctx.system.maxLeaseTtl(), bind });
      await writeDynamicRole(storage, name, role, roleEvent(stored ? 'update' : 'create', name));
      if (role.rollback_ldif === '') {
        return { warnings: ['rollback_ldif is not set: when creation_ldif fails part-way, the entries it already created stay in the directory'] };
      }
    });

  return { paths: [
    definePath({
      pattern: `role/(?<name>${DYNAMIC_ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Dynamic roles: templated LDIF that creates an account per credential request and deletes it when the lease ends.',
      fields,
      existenceCheck: async (req) => (await readDynamicRole(storage, roleName(req))) !== undefined,
      operations: {
        read: async (req) => {
          const role = await readDynamicRole(storage, roleName(req));
          if (!role) return;
          return { data: { ...role } };
        },
        create: write,
        update: write,
        // Outstanding leases keep their own copy of the deletion LDIF, so they are still cleaned up.
        delete: (req) => locks.run(lockKey(roleName(req)), () => deleteDynamicRole(storage, roleName(req), roleEvent('delete', roleName(req)))),
      },
    }),
    definePath({
      pattern: 'role/(?<prefix>(?:.+/)?)',
      canonical: { prefix: lowerName },
      description: 'Lists dynamic roles below a folder; sub-folders end in "/".',
      operations: {
        list: async (req) => ({ data: { keys: await listDynamicRoles(storage, req.params.prefix!.toLowerCase()) } }),
      },
    }),
  ] };
}
