// Cloud static roles: an existing application's client secret the engine owns, with its current and staged secret,
// the overlap, Rotate (a 409 inside a manual rotation's grace said plainly) and Get credentials (shown once).
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import { OneTime, Status, allows, capabilities, rotate, useLoad, useOutcome, when } from '../widgets.ts';

async function loadStaticRoles(mount: string) {
  const names = (await list(`${mount}static-roles`)).keys;
  const [roles, caps] = await Promise.all([
    Promise.all(names.map((n) => api('GET', `${mount}static-roles/${n}`).then((r) => r.data as Record<string, any>))),
    capabilities(names.flatMap((n) => [`${mount}rotate-role/${n}`, `${mount}static-creds/${n}`])),
  ]);
  return { roles: names.map((name, i) => ({ name, role: roles[i] })), caps };
}

const grace = (seconds: unknown) => (typeof seconds === 'number' && seconds > 0 ? `${seconds}s overlap` : 'no overlap');

export function CloudStaticRoles({ mount }: { mount: string }) {
  const [issued, setIssued] = useState<Array<[string, string, boolean]> | undefined>();
  const loaded = useLoad(() => loadStaticRoles(mount), [mount]);
  const { view, run } = useOutcome();
  const d = loaded.data;
  const get = async (name: string) => {
    const r = await run(() => api('GET', `${mount}static-creds/${name}`), `Read the served secret of ${name}.`);
    if (r) setIssued([['client_id', r.data.client_id, false], ['client_secret', r.data.client_secret, true], ['secret_id', r.data.secret_id, false], ['expires', when(r.data.expiration), false]]);
  };
  const rotateRole = async (name: string) => {
    await run(() => rotate(`${mount}rotate-role/${name}`), `Rotated ${name}.`);
    loaded.reload();
  };
  return html`<section aria-labelledby="cloud-static-roles"><h2 id="cloud-static-roles">Static roles</h2>
    <div data-testid="static-outcome">${view}</div>
    ${issued && html`<${OneTime} fields=${issued} onClose=${() => setIssued(undefined)} />`}
    <${Status} loaded=${loaded} />
    ${d?.roles.length === 0 && html`<p class="muted">No static roles.</p>`}
    ${d && d.roles.length > 0 && html`<table data-testid="cloud-static-roles"><thead><tr>
      <th scope="col">Role</th><th scope="col">Application</th><th scope="col">Served secret</th><th scope="col">Staged secret</th><th scope="col">Next rotation</th><th scope="col">Grace</th><th scope="col">State</th><th scope="col">Actions</th>
    </tr></thead><tbody>
    ${d.roles.map(({ name, role }) => html`<tr data-static-role=${name}>
      <th scope="row">${name}</th><td><code>${role.client_id || '—'}</code></td>
      <td>${role.secret_id ? html`<code>${role.secret_id}</code><br />expires ${when(role.expiration)}` : 'none yet'}</td>
      <td>${role.staged_secret_id ? html`<code>${role.staged_secret_id}</code><br />served from ${when(role.staged_start)}` : '—'}</td>
      <td>${when(role.next_rotation)}</td>
      <td>${grace(role.rotation_grace_period)}${role.manual_rotation_window_ends && html`<br />manual rotation grace until ${when(role.manual_rotation_window_ends)}`}</td>
      <td>${role.last_rotation_error ? html`<span class="badge bad">failing</span> <span class="muted">${role.last_rotation_error.message}</span>` : html`<span class="badge ok">OK</span>`}</td>
      <td class="actions">
        ${allows(d.caps[`${mount}rotate-role/${name}`], 'update', 'create') && html`<button onClick=${() => rotateRole(name)}>Rotate</button>`}
        ${allows(d.caps[`${mount}static-creds/${name}`], 'read') && html`<button onClick=${() => get(name)}>Get credentials</button>`}
      </td></tr>`)}
    </tbody></table>`}
  </section>`;
}
