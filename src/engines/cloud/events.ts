/**
 * The cloud engine's events (docs/events.md), under the `azure/` prefix of Vault's Azure secrets plugin. Vault's
 * public plugin emits none yet, so the names follow its LDAP plugin's for the same changes (`config-write`,
 * `role-create`, `creds-create`, `rotate`, `rotate-root`, …) and the metadata is the same: `modified`, `operation`,
 * `path` (relative to the mount), `name` where a role is named. Never a secret, an app password or its hint.
 */
import type { SystemView } from '../../core/framework.ts';
import type { PreparedWrite } from '../../core/storage/view.ts';

export type CloudEventType =
  | 'config-write' | 'config-delete'
  | 'role-create' | 'role-update' | 'role-delete' | 'creds-create' | 'creds-create-fail'
  | 'static-role-create' | 'static-role-update' | 'static-role-delete'
  | 'rotate' | 'rotate-fail' | 'rotate-root' | 'rotate-root-fail';

export interface CloudEventFields {
  operation: string;
  path: string;
  name?: string;
  /** A `*-fail` event's scrubbed error (the message the engine records for clients) and attempt count. */
  error?: string;
  attempts?: number;
}

/** The event as a write to commit with the change it reports. */
export function cloudEvent(system: Pick<SystemView, 'event'>, type: CloudEventType, f: CloudEventFields): PreparedWrite {
  const failed = f.error !== undefined;
  return system.event(`azure/${type}`, {
    modified: failed ? 'false' : 'true', operation: f.operation, path: f.path,
    ...(f.name === undefined ? {} : { name: f.name }),
    ...(failed ? { error: f.error!, attempts: String(f.attempts ?? 1) } : {}),
  });
}
