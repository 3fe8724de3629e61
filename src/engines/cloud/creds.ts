import { BadRequestError, ConflictError, NotFoundError, StrongroomError } from '../../core/errors.ts';
import { definePath, type BackendRequest, type BackendResponse, type PathDefinition, lowerName } from '../../core/framework.ts';
import { newUuid } from '../../core/ids.ts';
import type { NewPassword } from '../../providers/azure/graph.ts';
import { isEngineApp } from './config.ts';
import type { CloudEngine, Connection } from './engine.ts';
import { cloudEvent } from './events.ts';
import { createPrincipal } from './principals.ts';
import { DYNAMIC_SECRET, STATIC_SECRET, type DynamicLease, type StaticLease } from './revoke.ts';
import { readRole, ROLE_NAME, roleName, SIGN_IN_AUDIENCES, type CloudRole } from './roles.ts';

/**
 * The write-ahead entry `walId` guards the credential until its lease is stored: the lease, the entry's release and
 * the `azure/creds-create` event land in one transaction, so an event exists exactly for a credential a lease owns.
 */
async function credentialResponse(engine: CloudEngine, req: Issue, walId: string, appId: string, password: NewPassword, role: CloudRole, type: string, internal: DynamicLease | StaticLease): Promise<BackendResponse> {
  const secret = { type, ttl: role.ttl, maxTtl: role.max_ttl, renewable: true, internal: { ...internal } };
  const event = cloudEvent(engine.system, 'creds-create', { operation: 'read', path: `creds/${req.name}`, name: req.name });
  try {
    await engine.storage.transaction([engine.wal.releaseOp(walId)], [], [req.leaseWrite(secret), event]);
  } catch (err) {
    await engine.wal.compensate(walId, req.conn.clients);
    throw err;
  }
  return { data: { client_id: appId, client_secret: password.secretText, expiration: password.endDateTime }, secret };
}

/** What issuing needs of the request. */
interface Issue extends Pick<BackendRequest, 'leaseId' | 'leaseWrite'> {
  name: string;
  conn: Connection;
}

/** A password on an existing (or the role's persisted) application; revoke removes only this password. */
async function issueStatic(engine: CloudEngine, req: Issue, role: CloudRole, endDateTime: Date): Promise<BackendResponse> {
  const { conn, name } = req;
  const appObjectId = role.managed_app?.app_object_id ?? role.application_object_id;
  const appId = role.managed_app?.app_id ?? role.application_id;
  // The config may have changed (or come from the environment) since the role was written.
  if (isEngineApp(conn.config, appId)) throw new BadRequestError(`role '${name}' targets the engine's own application; credentials are not issued for it`);
  const displayName = `strongroom-${newUuid()}`;
  const walId = await engine.wal.begin({ kind: 'password', created_at: 0, lease_id: req.leaseId, app_object_id: appObjectId, display_name: displayName });
  let password: NewPassword;
  try {
    password = await conn.clients.graph.addApplicationPassword(appObjectId, { displayName, endDateTime });
  } catch (err) {
    await engine.wal.compensate(walId, conn.clients);
    if (/size of the object has exceeded its limit/i.test((err as Error).message)) {
      throw new ConflictError(`maximum number of application passwords reached on application ${appObjectId}`);
    }
    throw err;
  }
  return credentialResponse(engine, req, walId, appId, password, role, STATIC_SECRET, {
    app_object_id: appObjectId, app_id: appId, key_id: password.keyId, key_end_date: password.endDateTime, role: name,
  });
}

/** A new application, service principal and password with the role's assignments and groups. */
async function issueDynamic(engine: CloudEngine, req: Issue, role: CloudRole, endDateTime: Date): Promise<BackendResponse> {
  const { conn, name } = req;
  const created = await createPrincipal(conn.clients, engine.wal, {
    displayName: `strongroom-${newUuid()}`, tags: role.tags, signInAudience: SIGN_IN_AUDIENCES[role.sign_in_audience] ?? '',
    roles: role.cloud_roles, groups: role.cloud_groups, permanentlyDelete: role.permanently_delete,
    password: { displayName: 'strongroom', endDateTime }, leaseId: req.leaseId,
  });
  const password = created.password!;
  return credentialResponse(engine, req, created.walId, created.appId, password, role, DYNAMIC_SECRET, {
    app_object_id: created.appObjectId, app_id: created.appId, sp_object_id: created.spObjectId,
    role_assignment_ids: created.roleAssignmentIds, group_membership_ids: created.groupIds,
    permanently_delete: role.permanently_delete, key_id: password.keyId, key_end_date: password.endDateTime, role: name,
  });
}

export function credsPaths(engine: CloudEngine): PathDefinition[] {
  return [
    definePath({
      pattern: `creds/(?<name>${ROLE_NAME})`,
      canonical: { name: lowerName },
      description: 'Issue a client id and secret for a role.',
      operations: {
        read: async (req) => {
          const name = roleName(req);
          const role = await readRole(req.storage, name);
          if (!role) throw new NotFoundError(`role '${name}' does not exist`);
          const conn = await engine.connect();
          // The password expires with the longest the lease may live, not years later.
          const lifetime = role.max_ttl || engine.system.maxLeaseTtl();
          const endDateTime = new Date(engine.clock.now() + lifetime * 1000);
          const issue: Issue = { name, conn, leaseId: req.leaseId, leaseWrite: (secret) => req.leaseWrite(secret) };
          const issuing = role.application_object_id || role.managed_app ? issueStatic(engine, issue, role, endDateTime) : issueDynamic(engine, issue, role, endDateTime);
          return issuing.catch(async (err: unknown) => {
            // What was created is rolled back (or left to the WAL's sweep); the event says issuing failed, as the client hears it.
            const error = err instanceof StrongroomError ? err.message : 'internal error';
            await engine.storage.commit([cloudEvent(engine.system, 'creds-create-fail', { operation: 'read', path: `creds/${name}`, name, error })])
              .catch((e: unknown) => engine.logger.warn({ role: name, err: (e as Error).message }, 'the creds-create-fail event could not be recorded'));
            throw err;
          });
        },
      },
    }),
  ];
}
