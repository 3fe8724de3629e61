import type { Logger } from 'pino';
import { z } from 'zod';
import { BadRequestError, NotFoundError, StrongroomError } from '../../core/errors.ts';
import { definePath, type LeaseView, type PathDefinition, type SecretType, type SystemView, lowerName } from '../../core/framework.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';
import type { Template } from '../../lib/gotemplate/index.ts';
import { parseLdif, type LdifRecord } from '../../lib/ldif/index.ts';
import type { LdapClient, LdifExecResult } from '../../providers/ldap/client.ts';
import { scrub } from '../../providers/ldap/errors.ts';
import type { AccountIdentity } from './accounts.ts';
import { DYNAMIC_ROLE_NAME, checkRecordDns, readDynamicRole, roleName, type DynamicRole } from './dynamic-roles.ts';
import { DynamicRoleCache, type PreparedRole } from './dynamic-role-cache.ts';
import { generatePassword } from './config-store.ts';
import type { LdapEngine, LdapEnginePart } from './engine.ts';
import { DynamicTemplates, renderLdifTemplate, type LdifField, type LdifTemplateData } from './dynamic-templates.ts';

export const DYNAMIC_CREDS_SECRET_TYPE = 'dynamic_creds';

/**
 * Everything revoke needs, copied at issue time so that editing or deleting the role changes nothing
 * for accounts already handed out. The deletion LDIF is stored rendered (and already checked to parse).
 */
const leaseInternalSchema = z.object({
  role_name: z.string(),
  username: z.string(),
  distinguished_names: z.array(z.string()),
  deletion_ldif: z.string().min(1),
});
type LeaseInternal = z.infer<typeof leaseInternalSchema>;

/** Internal data this process built at issue: a lease read back as registered (leases.ts #recent) carries the very object. */
const built = new WeakSet<object>();

function parseLeaseInternal(lease: LeaseView): LeaseInternal {
  if (built.has(lease.internal)) return lease.internal as LeaseInternal;
  const parsed = leaseInternalSchema.safeParse(lease.internal);
  if (!parsed.success) throw new Error(`lease "${lease.id}" has broken internal data: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
  return parsed.data;
}

/** The lease TTL the core will grant, computed here too so .ExpirationTime matches the real lease. */
function effectiveTtl(role: DynamicRole, system: SystemView): number {
  const ttl = role.default_ttl || system.defaultLeaseTtl();
  const caps = [role.max_ttl, system.maxLeaseTtl()].filter((n) => n > 0);
  return caps.length ? Math.min(ttl, ...caps) : ttl;
}

function templateData(base: Omit<LdifTemplateData, 'IssueTime' | 'IssueTimeSeconds' | 'ExpirationTime' | 'ExpirationTimeSeconds'>, issueMs: number, ttlSeconds: number): LdifTemplateData {
  const expireMs = issueMs + ttlSeconds * 1000;
  return {
    ...base,
    IssueTime: new Date(issueMs).toISOString(),
    IssueTimeSeconds: Math.floor(issueMs / 1000),
    ExpirationTime: new Date(expireMs).toISOString(),
    ExpirationTimeSeconds: Math.floor(expireMs / 1000),
  };
}

/** A 400 when the directory refused what the LDIF asked for, else a 502; every failure is listed. */
function failure(primary: LdifExecResult, messages: string[]): StrongroomError {
  return new StrongroomError(primary.errors[0]?.status ?? 502, messages);
}

/**
 * Renders every template before touching the directory, so an account is never created whose
 * deletion or rollback LDIF could not be rendered, and no record of any of them reaches the directory
 * when one names the bind account. The deletion LDIF is kept as text for the lease.
 */
function renderAll(prepared: PreparedRole, data: LdifTemplateData, bind: AccountIdentity) {
  const passed = new Set<string>();
  const render = (field: LdifField, template: Template) => {
    const rendered = renderLdifTemplate(field, template, data);
    checkRecordDns(field, rendered.records, bind, passed);
    return rendered;
  };
  return {
    creation: render('creation_ldif', prepared.creation).records,
    rollback: prepared.rollback ? render('rollback_ldif', prepared.rollback).records : [],
    deletionLdif: render('deletion_ldif', prepared.deletion).text,
  };
}

type Engine = Pick<LdapEngine, 'ctx' | 'storage' | 'clock' | 'connections'>;

export function dynamicCredsPart(engine: Engine & Pick<LdapEngine, 'configDependents'>): LdapEnginePart {
  const templates = new DynamicTemplates(() => engine.clock.now());
  // Accounts outlive their role until their lease ends, and only the config can reach them to delete them.
  engine.configDependents.push({ what: 'outstanding dynamic credential leases', names: () => engine.ctx.system.leaseIds('creds/'), remedy: 'revoke' });
  return { paths: credsPaths(engine, templates, new DynamicRoleCache(templates)), secrets: [dynamicCredsSecret(engine)] };
}

function credsPaths(engine: Engine, templates: DynamicTemplates, roles: DynamicRoleCache): PathDefinition[] {
  return [
    definePath({
      pattern: `creds/(?<name>${DYNAMIC_ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Creates an account from a dynamic role and returns its credentials with a lease.',
      operations: {
        read: async (req) => {
          const name = roleName(req);
          const prepared = await roles.read(engine.storage, name);
          if (!prepared) throw new NotFoundError(`dynamic role "${name}" not found`);
          const { role } = prepared;
          const { config, client, bindAccount } = await engine.connections.get();

          const displayName = req.caller?.displayName ?? '';
          const username = templates.renderUsername(prepared.username, { DisplayName: displayName, RoleName: name });
          const password = await generatePassword(engine, config);
          const ttl = effectiveTtl(role, engine.ctx.system);
          const data = templateData({ Username: username, Password: password, RoleName: name, DisplayName: displayName }, engine.clock.now(), ttl);
          const { creation, rollback, deletionLdif } = renderAll(prepared, data, await bindAccount());
          const internal: LeaseInternal = { role_name: name, username, distinguished_names: creation.map((r) => r.dn), deletion_ldif: deletionLdif };
          built.add(internal);
          const secret = { type: DYNAMIC_CREDS_SECRET_TYPE, ttl, maxTtl: role.max_ttl, renewable: true, internal };

          // The lease is stored before the account exists: it is the write-ahead record, so a crash after the
          // creation still ends in the deletion LDIF (entries already gone count as deleted). Its event rides with it.
          await req.registerLease(secret, [credsEvent(engine, name)]);
          await create(client, creation, rollback, { role: name, password, logger: engine.ctx.logger }).catch(async (err: unknown) => {
            await engine.storage.commit([credsEvent(engine, name, err instanceof StrongroomError ? err.message : 'internal error')])
              .catch((e: unknown) => engine.ctx.logger.warn({ role: name, err: (e as Error).message }, 'the creds-create-fail event could not be recorded'));
            throw err;
          });
          return { data: { distinguished_names: internal.distinguished_names, password, username }, secret };
        },
      },
    }),
  ];
}

/**
 * `ldap/creds-create`, committed with the credential's lease: both are written before the account is created (the
 * lease is the write-ahead record), so no commit is added to the request. When the creation then fails (rolled back,
 * the lease forgotten: `lease/revoked`), `ldap/creds-create-fail` follows in a commit of its own, with `error` as the
 * client receives it (scrubbed of the password).
 */
function credsEvent(engine: Engine, name: string, error?: string): PreparedWrite {
  return engine.ctx.system.event(error === undefined ? 'ldap/creds-create' : 'ldap/creds-create-fail', {
    modified: error === undefined ? 'true' : 'false', operation: 'read', path: `creds/${name}`, name, ...(error === undefined ? {} : { error }),
  });
}

async function create(client: Pick<LdapClient, 'executeLdif'>, creation: LdifRecord[], rollback: LdifRecord[], ctx: { role: string; password: string; logger: Logger }): Promise<void> {
  const created = await client.executeLdif(creation, 'stop-at-first-error');
  if (created.ok) return;
  const messages = created.errors.map((e) => `failed to create user: ${e.message}`);
  if (rollback.length === 0) {
    const applied = created.results.filter((r) => r.status === 'ok').map((r) => `"${r.dn}"`);
    if (applied.length) messages.push(`no rollback_ldif is set, so these changes were left in place: ${applied.join(', ')}`);
  } else {
    const rolledBack = await client.executeLdif(rollback, 'continue-past-errors');
    messages.push(...rolledBack.errors.map((e) => `failed to roll back user creation: ${e.message}`));
  }
  const scrubbed = messages.map((m) => scrub(m, [ctx.password]));
  ctx.logger.warn({ role: ctx.role, errors: scrubbed }, 'dynamic credential creation failed');
  throw failure(created, scrubbed);
}

function dynamicCredsSecret(engine: Engine): SecretType {
  return {
    type: DYNAMIC_CREDS_SECRET_TYPE,
    async revoke(lease) {
      const internal = parseLeaseInternal(lease);
      const records = parseLdif(internal.deletion_ldif);
      const { client } = await engine.connections.get();
      // Every entry runs even after a failure; an entry (or group value) already gone counts as deleted.
      const result = await client.executeLdif(records, 'continue-past-errors');
      if (!result.ok) throw failure(result, result.errors.map((e) => `failed to delete user "${internal.username}": ${e.message}`));
    },
    async renew(lease) {
      const internal = parseLeaseInternal(lease);
      const role = await readDynamicRole(engine.storage, internal.role_name);
      if (!role) throw new BadRequestError(`dynamic role "${internal.role_name}" no longer exists, so its credentials cannot be renewed`);
      return role.max_ttl > 0 ? { maxTtl: role.max_ttl } : undefined;
    },
  };
}
