/**
 * `static-roles/:name` (create, update, read, delete), `LIST static-roles` and `static-roles/:name/import`: roles
 * that own the client secret of an existing application and rotate it (static-rotation.ts). Vault 2.2's names.
 */
import { z } from 'zod';
import { BadRequestError, ConflictError, NotFoundError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { parseDurationSecond, DurationError } from '../../core/durations.ts';
import { definePath, lowerName, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import type { StorageView } from '../../core/storage/view.ts';
import { readConfig, sameAppId } from './config.ts';
import type { CloudEngine } from './engine.ts';
import { cloudEvent } from './events.ts';
import { resolveApplication, ROLE_NAME, roleName } from './roles.ts';
import { lockKey, type StaticRotation } from './static-rotation.ts';
import {
  DEFAULT_GRACE, DEFAULT_ROTATION_PERIOD, MIN_ROTATION_PERIOD, deleteStaticRole, listStaticRoles, overlapMs, readStaticRole, readStaticSnapshot,
  rotationDue, seamlessFor, staticRoleView, type Removal, type StaticRole,
} from './static-store.ts';

const METADATA_MAX_KEYS = 64;
const METADATA_MAX_VALUE = 1024;
const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** -1 (no overlap), 0 (the default) or a duration. */
const graceSchema = z.unknown().transform((v, ctx) => {
  if (v === -1 || (typeof v === 'string' && v.trim() === '-1')) return -1;
  try {
    const s = parseDurationSecond(v);
    if (s < 0) throw new DurationError('only -1 (no overlap) may be negative');
    return s;
  } catch (err) {
    if (!(err instanceof DurationError)) throw err;
    ctx.addIssue({ code: 'custom', message: err.message });
    return z.NEVER;
  }
});

const fields = {
  name: field.string('Name of the static role.'),
  application_object_id: field.string('Object id of the existing application whose client secret the role owns (required at creation; cannot change).', { maxLength: 64 }),
  rotation_period: field.duration('Lifetime of each client secret, and so the rotation period: at least 720h (default 17520h).'),
  ttl: field.duration('Deprecated name of rotation_period; sending both with different values is a 400.', { aliasOf: 'rotation_period' }),
  metadata: field.kvPairs('Key/value pairs returned with static-creds (merged with the request\'s; the role\'s keys win).', { maxKeys: METADATA_MAX_KEYS }),
  defer_initial_creds: field.bool('Do not create a secret at creation: the role has none until import or rotate-role (default false).'),
  skip_import_rotation: field.bool('Deprecated name of defer_initial_creds; sending both with different values is a 400.', { aliasOf: 'defer_initial_creds' }),
  seamless_rotation: field.bool('Stage each next secret to start one grace period before the current one expires (default: the config\'s seamless_rotation).'),
  rotation_grace_period: field.custom(graceSchema, 'How long old and new secrets overlap: a duration up to (rotation_period - 1h)/2, -1 for no overlap, 0 for the default (300s).'),
};
type Fields = typeof fields;

const importFields = {
  name: field.string('Name of the static role.'),
  secret_id: field.string('keyId of the existing password on the application the role takes over.', { required: true, maxLength: 64 }),
  client_secret: field.string('Its value; without it static-creds is refused until the first rotation.', { secret: true, maxLength: 1024 }),
};

function checkMetadata(metadata: Record<string, string>): Record<string, string> {
  for (const [k, v] of Object.entries(metadata)) {
    if (k.trim() === '') throw new BadRequestError('invalid value for field "metadata": keys cannot be empty');
    if (v.length > METADATA_MAX_VALUE) throw new BadRequestError(`invalid value for field "metadata": a value is at most ${METADATA_MAX_VALUE} characters`);
  }
  return metadata;
}

/** Every rule that needs no directory call, on the role as it will be stored. */
function checkRole(r: StaticRole): void {
  if (!GUID.test(r.application_object_id)) throw new BadRequestError('invalid value for field "application_object_id": expected an application object id (GUID)');
  if (r.rotation_period < MIN_ROTATION_PERIOD) throw new BadRequestError(`invalid value for field "rotation_period": must be at least ${MIN_ROTATION_PERIOD / 3600}h`);
  const maxGrace = Math.floor((r.rotation_period - 3600) / 2);
  if (r.rotation_grace_period > maxGrace) throw new BadRequestError(`invalid value for field "rotation_grace_period": at most (rotation_period - 1h)/2 = ${maxGrace}s`);
}

async function writeHandler(engine: CloudEngine, rotation: StaticRotation, req: BackendRequest<Fields>): Promise<void> {
  const name = roleName(req);
  await engine.locks.run(lockKey(name), async () => {
    const snap = await readStaticSnapshot(req.storage, name);
    const current = snap?.role;
    // The pipeline folded the aliases (ttl, skip_import_rotation) into their fields before the ACL; errors name the field as sent.
    const periodAs = req.has('rotation_period') ? req.sentAs('rotation_period') ?? 'rotation_period' : undefined;
    const deferAs = req.has('defer_initial_creds') ? req.sentAs('defer_initial_creds') ?? 'defer_initial_creds' : undefined;
    if (current && deferAs) throw new BadRequestError(`invalid value for field "${deferAs}": it has no effect on updates`);
    const appId = (req.data.application_object_id ?? '').trim();
    if (!current && !appId) throw new BadRequestError('missing required field "application_object_id"');
    if (current && req.has('application_object_id') && appId.toLowerCase() !== current.application_object_id.toLowerCase()) {
      throw new BadRequestError('invalid value for field "application_object_id": a static role\'s application cannot change; delete the role and create another');
    }
    const next: StaticRole = current ? { ...current } : {
      application_object_id: appId, application_id: '', rotation_period: DEFAULT_ROTATION_PERIOD, metadata: {}, defer_initial_creds: false,
      seamless_rotation: null, rotation_grace_period: DEFAULT_GRACE, current: null, staged: null, removals: [], next_rotation: 0, last_rotation: 0, failure: null,
    };
    if (periodAs) {
      const period = req.data.rotation_period ?? 0;
      if (period < MIN_ROTATION_PERIOD) throw new BadRequestError(`invalid value for field "${periodAs}": must be at least ${MIN_ROTATION_PERIOD / 3600}h`);
      next.rotation_period = period;
    }
    if (deferAs) next.defer_initial_creds = req.data.defer_initial_creds ?? false;
    if (req.has('metadata')) next.metadata = checkMetadata(req.data.metadata ?? {});
    if (req.has('seamless_rotation')) next.seamless_rotation = req.data.seamless_rotation ?? null;
    if (req.has('rotation_grace_period')) next.rotation_grace_period = req.data.rotation_grace_period || DEFAULT_GRACE;
    checkRole(next);

    const conn = await engine.connect();
    // Resolved (and the own application refused, 400) at every write: the config may have changed since.
    const app = await resolveApplication(conn, next.application_object_id);
    next.application_object_id = app.id;
    next.application_id = app.appId;
    const seamless = seamlessFor(next, conn.config.seamless_rotation);
    let walId: string | undefined;
    const now = engine.clock.now();
    if (!current && !next.defer_initial_creds) {
      const added = await rotation.addSecret(conn, next, now, now + next.rotation_period * 1000);
      walId = added.walId;
      Object.assign(next, { current: added.secret, last_rotation: now });
    }
    // A changed period, grace or mode moves the next rotation; a staged secret or a pending retry keeps its time.
    if (next.current && !next.staged && !next.failure) next.next_rotation = Math.max(now, rotationDue(next.current, next, seamless));
    const event = roleEvent(engine, current ? 'update' : 'create', name, req.operation);
    if (!(await rotation.commit(conn, name, next, snap?.raw, walId, [event]))) throw new ConflictError(`static role '${name}' changed meanwhile; retry`);
  });
  await rotation.refresh();
}

/** `azure/static-role-create|update|delete`; an import is an update of the role (its secret is not a rotation). */
const roleEvent = (engine: CloudEngine, change: 'create' | 'update' | 'delete', name: string, operation: string, path = `static-roles/${name}`) =>
  cloudEvent(engine.system, `static-role-${change}`, { operation, path, name });

async function importHandler(engine: CloudEngine, rotation: StaticRotation, req: BackendRequest<typeof importFields>): Promise<void> {
  const name = roleName(req);
  await engine.locks.run(lockKey(name), async () => {
    const snap = await readStaticSnapshot(req.storage, name);
    if (!snap) throw new NotFoundError(`static role '${name}' does not exist`);
    const r = snap.role;
    const keyId = (req.data.secret_id ?? '').trim();
    if (!GUID.test(keyId)) throw new BadRequestError('invalid value for field "secret_id": expected the keyId (GUID) of a password on the application');
    const conn = await engine.connect();
    await resolveApplication(conn, r.application_object_id);
    const app = await conn.clients.graph.getApplication(r.application_object_id);
    const cred = app?.passwordCredentials.find((p) => p.keyId.toLowerCase() === keyId.toLowerCase());
    if (!cred) throw new BadRequestError(`invalid value for field "secret_id": the application has no password with keyId '${keyId}'`);
    const secret = req.data.client_secret ?? '';
    if (secret && cred.hint && !secret.startsWith(cred.hint)) throw new BadRequestError('invalid value for field "client_secret": it is not the value of secret_id (its hint differs)');
    const now = engine.clock.now();
    const imported = {
      key_id: cred.keyId, display_name: cred.displayName ?? '', client_secret: secret,
      start: Date.parse(cred.startDateTime ?? '') || now, end: Date.parse(cred.endDateTime ?? '') || now,
    };
    // The secrets served so far keep working for the grace period, as after rotate-role.
    const removals: Removal[] = r.removals.filter((x) => x.key_id !== imported.key_id);
    for (const old of [r.current, r.staged]) {
      if (old && old.key_id !== imported.key_id && !removals.some((x) => x.key_id === old.key_id)) removals.push({ key_id: old.key_id, remove_at: now + overlapMs(r), reason: 'import' });
    }
    const next: StaticRole = {
      ...r, current: imported, staged: null, removals, failure: null,
      next_rotation: Math.max(now, rotationDue(imported, r, seamlessFor(r, conn.config.seamless_rotation))),
    };
    if (!(await rotation.commit(conn, name, next, snap.raw, undefined, [roleEvent(engine, 'update', name, 'update', `static-roles/${name}/import`)]))) throw new ConflictError(`static role '${name}' changed meanwhile; retry`);
  });
  await rotation.refresh();
}

/** The first static role whose secret is on the application `appId` (config writes refuse to make it the engine's own). */
export async function staticRoleIssuingOn(storage: StorageView, appId: string): Promise<string | undefined> {
  for (const name of await listStaticRoles(storage)) {
    const role = await readStaticRole(storage, name);
    if (role && sameAppId(role.application_id, appId)) return name;
  }
  return undefined;
}

/** Ends the role: pending removals run now and a staged secret nobody was served goes; the served secret stays until it expires. */
async function deleteHandler(engine: CloudEngine, name: string): Promise<void> {
  await engine.locks.run(lockKey(name), async () => {
    const snap = await readStaticSnapshot(engine.storage, name);
    if (!snap) return;
    const r = snap.role;
    const now = engine.clock.now();
    const conn = await engine.connect();
    const gone = [...r.removals.map((x) => x.key_id), ...(r.staged && r.staged.start > now ? [r.staged.key_id] : [])];
    for (const keyId of gone) await conn.clients.graph.removeApplicationPassword(r.application_object_id, keyId);
    if (!(await deleteStaticRole(engine.storage, name, snap.raw, roleEvent(engine, 'delete', name, 'delete')))) throw new ConflictError(`static role '${name}' changed meanwhile; retry`);
  });
}

export function staticRolePaths(engine: CloudEngine, rotation: StaticRotation): PathDefinition[] {
  const configSeamless = async (): Promise<boolean> => (await readConfig(engine.storage))?.seamless_rotation ?? true;
  return [
    definePath({
      pattern: 'static-roles/?',
      description: 'List static roles.',
      operations: { list: async (req) => ({ data: { keys: await listStaticRoles(req.storage) } }) },
    }),
    definePath({
      pattern: `static-roles/(?<name>${ROLE_NAME})/import`,
      canonical: { name: lowerName },
      description: 'Take over an existing client secret of the role\'s application.',
      fields: importFields,
      operations: { update: async (req) => importHandler(engine, rotation, req) },
    }),
    definePath({
      pattern: `static-roles/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Static roles: an existing application whose client secret the engine owns and rotates.',
      fields,
      existenceCheck: async (req) => (await readStaticRole(req.storage, roleName(req))) !== undefined,
      operations: {
        read: async (req) => {
          const role = await readStaticRole(req.storage, roleName(req));
          return role ? { data: staticRoleView(role, await configSeamless(), engine.clock.now()) } : undefined;
        },
        update: async (req) => writeHandler(engine, rotation, req),
        delete: async (req) => deleteHandler(engine, roleName(req)),
      },
    }),
  ];
}
