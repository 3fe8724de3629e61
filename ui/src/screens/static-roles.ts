// LDAP static roles: schedule, last and next rotation and their health, with Rotate now, Reveal, Edit and Delete.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import type { Mounts } from '../main.ts';
import { Badge, Confirm, MountPicker, Secret, Status, allows, capabilities, useLoad, useOutcome, when } from '../widgets.ts';

interface Row { name: string; role: Record<string, any>; failure?: { attempts?: number; kind?: string; since?: string; last_error?: string }; caps: Record<string, string[]> }

async function loadRoles(mount: string): Promise<Row[]> {
  const [{ keys }, failures] = await Promise.all([list(`${mount}static-role`), list(`${mount}rotation-failures`).catch(() => ({ keys: [] as string[], key_info: undefined as Record<string, any> | undefined }))]);
  const names = keys.filter((k) => !k.endsWith('/'));
  const paths = names.flatMap((n) => [`${mount}rotate-role/${n}`, `${mount}static-cred/${n}`, `${mount}static-role/${n}`]);
  const [caps, roles] = await Promise.all([capabilities(paths), Promise.all(names.map((n) => api('GET', `${mount}static-role/${n}`).then((r) => r.data)))]);
  return names.map((name, i) => ({ name, role: roles[i], failure: failures.key_info?.[name], caps }));
}

function badges({ role, failure }: Row) {
  const out = [];
  const attempts = failure?.attempts ?? (role.last_rotation_error ? 1 : 0);
  if (role.last_rotation_error || failure?.kind === 'rotation') out.push(html`<${Badge} kind="bad" text=${`failing ×${attempts}`} />`);
  if (role.drifted) out.push(html`<${Badge} kind="warn" text=${`drifted since ${when(role.drift_detected_at)}`} />`);
  if (role.disable_automated_rotation) out.push(html`<${Badge} kind="off" text="automation off" />`);
  if (role.dual_account_mode || role.active_account) out.push(html`<${Badge} kind="off" text=${`dual account: ${role.active_account ?? 'on'}${role.grace_period_end ? `, grace ends ${when(role.grace_period_end)}` : ''}`} />`);
  if (out.length === 0) out.push(html`<${Badge} kind="ok" text="OK" />`);
  return out;
}

/** Edit a role's rotation: a period or a cron schedule (the other is cleared), and whether automation is off. */
function EditRotation({ role, onSave, onCancel }: { role: Record<string, any>; onSave: (body: Record<string, unknown>) => void; onCancel: () => void }) {
  const [mode, setMode] = useState<'period' | 'schedule'>(role.rotation_schedule ? 'schedule' : 'period');
  const [value, setValue] = useState(String(role.rotation_schedule || role.rotation_period || ''));
  const [off, setOff] = useState(!!role.disable_automated_rotation);
  const save = (e: Event) => {
    e.preventDefault();
    onSave({
      ...(mode === 'period' ? { rotation_period: value.trim(), rotation_schedule: '' } : { rotation_schedule: value.trim(), rotation_period: 0 }),
      disable_automated_rotation: off,
    });
  };
  return html`<form class="confirm" onSubmit=${save} aria-label="Edit rotation">
    <label>Rotate by <select value=${mode} onChange=${(e: Event) => setMode((e.target as HTMLSelectElement).value as 'period' | 'schedule')}>
      <option value="period">period (e.g. 24h)</option><option value="schedule">cron schedule (UTC)</option></select></label>
    <label>Value <input value=${value} required onInput=${(e: Event) => setValue((e.target as HTMLInputElement).value)} /></label>
    <label class="inline"><input type="checkbox" checked=${off} onChange=${(e: Event) => setOff((e.target as HTMLInputElement).checked)} /> automation off</label>
    <button type="submit">Save</button><button type="button" onClick=${onCancel}>Cancel</button>
  </form>`;
}

const schedule = (role: Record<string, any>) => (role.rotation_schedule ? `schedule ${role.rotation_schedule}` : role.rotation_period ? `every ${role.rotation_period}s` : '—');

export function StaticRoles({ mounts }: { mounts: Mounts }) {
  const [mount, setMount] = useState(mounts.ldap[0]);
  const [filter, setFilter] = useState<'all' | 'failing' | 'drifted'>('all');
  const [editing, setEditing] = useState<string | undefined>();
  const [revealed, setRevealed] = useState<{ name: string; username: string; password: string } | undefined>();
  const rows = useLoad(() => loadRoles(mount), [mount]);
  const { view, run } = useOutcome();
  const shown = (rows.data ?? []).filter((r) => filter === 'all' || (filter === 'failing' ? !!(r.role.last_rotation_error || r.failure?.kind === 'rotation') : r.role.drifted));
  const act = async (what: () => Promise<unknown>, done: string) => {
    await run(what, done);
    rows.reload();
  };
  return html`<${MountPicker} mounts=${mounts.ldap} value=${mount} onChange=${setMount} />
    <fieldset class="filters"><legend>Show</legend>
      ${(['all', 'failing', 'drifted'] as const).map((f) => html`<label class="inline"><input type="radio" name="filter" checked=${filter === f} onChange=${() => setFilter(f)} /> ${f}</label>`)}
    </fieldset>
    ${view}
    ${revealed && html`<section class="onetime" aria-label="Current password">
      <p>Current password of <strong>${revealed.name}</strong> (${revealed.username})</p>
      <${Secret} value=${revealed.password} label="password" /> <button onClick=${() => setRevealed(undefined)}>Close</button></section>`}
    <${Status} loaded=${rows} />
    <table data-testid="static-roles"><thead><tr>
      <th scope="col">Role</th><th scope="col">Account</th><th scope="col">Rotation</th><th scope="col">Last rotation</th><th scope="col">Next rotation</th><th scope="col">State</th><th scope="col">Actions</th>
    </tr></thead><tbody>
    ${shown.map((r) => html`<tr data-role=${r.name}>
      <th scope="row">${r.name}</th><td>${r.role.username}</td><td>${schedule(r.role)}</td>
      <td>${when(r.role.last_service_rotation)}</td><td>${when(r.role.next_rotation)}</td>
      <td>${badges(r)}${r.role.last_rotation_error && html`<div class="muted">${r.role.last_rotation_error.message}</div>`}</td>
      <td class="actions">
        ${allows(r.caps[`${mount}rotate-role/${r.name}`], 'update', 'create') && html`<button onClick=${() => act(() => api('POST', `${mount}rotate-role/${r.name}`, {}), `Rotated ${r.name}.`)}>Rotate now</button>`}
        ${allows(r.caps[`${mount}static-cred/${r.name}`], 'read') && html`<button onClick=${() => run(() => api('GET', `${mount}static-cred/${r.name}`), (c: any) => { setRevealed({ name: r.name, username: c.data.username, password: c.data.password }); return `Read the password of ${r.name}.`; })}>Reveal</button>`}
        ${allows(r.caps[`${mount}static-role/${r.name}`], 'update') && (editing === r.name
          ? html`<${EditRotation} role=${r.role} onCancel=${() => setEditing(undefined)}
              onSave=${(body: Record<string, unknown>) => { setEditing(undefined); void act(() => api('POST', `${mount}static-role/${r.name}`, body), `Updated ${r.name}.`); }} />`
          : html`<button onClick=${() => setEditing(r.name)}>Edit</button>`)}
        ${allows(r.caps[`${mount}static-role/${r.name}`], 'delete') && html`<${Confirm} label="Delete" question=${`Delete static role ${r.name}? The account keeps its current password.`} onConfirm=${() => act(() => api('DELETE', `${mount}static-role/${r.name}`), `Deleted ${r.name}.`)} />`}
      </td></tr>`)}
    </tbody></table>
    ${rows.data && shown.length === 0 && html`<p class="muted">No static roles${filter === 'all' ? '' : ` ${filter}`}.</p>`}`;
}
