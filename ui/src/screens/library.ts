// LDAP library sets: who holds which account and until when, with Check-out, Check-in (own) and Force check-in.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import type { Mounts } from '../main.ts';
import { Confirm, MountPicker, OneTime, Status, allows, capabilities, useLoad, useOutcome, when } from '../widgets.ts';

interface SetView { name: string; set: Record<string, any>; status: Record<string, any> }

async function loadSets(mount: string) {
  const names = (await list(`${mount}library`)).keys.filter((k) => !k.endsWith('/'));
  const sets: SetView[] = await Promise.all(names.map(async (name) => {
    const [set, status] = await Promise.all([api('GET', `${mount}library/${name}`), api('GET', `${mount}library/${name}/status`)]);
    return { name, set: set.data, status: status.data };
  }));
  const caps = await capabilities(names.flatMap((n) => [`${mount}library/${n}/check-out`, `${mount}library/${n}/check-in`, `${mount}library/manage/${n}/check-in`]));
  return { sets, caps };
}

export function Library({ mounts }: { mounts: Mounts }) {
  const [mount, setMount] = useState(mounts.ldap[0]);
  const [lent, setLent] = useState<Array<[string, string, boolean]> | undefined>();
  const loaded = useLoad(() => loadSets(mount), [mount]);
  const { view, run } = useOutcome();
  const caps = loaded.data?.caps ?? {};
  const act = async (what: () => Promise<unknown>, done: string) => {
    await run(what, done);
    loaded.reload();
  };
  const checkOut = async (name: string) => {
    const r = await run(() => api('POST', `${mount}library/${name}/check-out`, {}), (r: any) => `Checked out ${r.data.service_account_name} from ${name}.`);
    if (r) setLent([['account', r.data.service_account_name, false], ['password', r.data.password, true], ['lease', r.lease_id, false], ['lease duration', `${r.lease_duration}s`, false]]);
    loaded.reload();
  };
  return html`<${MountPicker} mounts=${mounts.ldap} value=${mount} onChange=${setMount} />
    ${view}
    ${lent && html`<${OneTime} fields=${lent} onClose=${() => setLent(undefined)} />`}
    <${Status} loaded=${loaded} />
    ${loaded.data?.sets.length === 0 && html`<p class="muted">No library sets.</p>`}
    ${loaded.data?.sets.map(({ name, set, status }) => {
      const accounts: string[] = set.service_account_names ?? [];
      const available = accounts.filter((a) => status[a]?.available).length;
      return html`<section class="set" data-set=${name} aria-labelledby=${`set-${name}`}>
        <h2 id=${`set-${name}`}>${name}</h2>
        <p><strong data-testid="available">${available}/${accounts.length}</strong> available · <span data-testid="waiters">${status.waiters ?? 0}</span> waiting · ttl ${set.ttl}s, max ${set.max_ttl}s
          ${allows(caps[`${mount}library/${name}/check-out`], 'update', 'create') && html` <button onClick=${() => checkOut(name)}>Check out</button>`}</p>
        <table><thead><tr><th scope="col">Account</th><th scope="col">State</th><th scope="col">Borrower entity</th><th scope="col">Borrower accessor</th><th scope="col">Lease</th><th scope="col">Checked out at</th><th scope="col">Expires at</th><th scope="col">Actions</th></tr></thead>
        <tbody>${accounts.map((a) => {
          const s = status[a] ?? {};
          return html`<tr data-account=${a}><th scope="row">${a}</th><td>${s.available ? 'available' : 'checked out'}</td>
            <td>${s.borrower_entity_id || '—'}</td><td><code>${s.borrower_accessor || '—'}</code></td><td><code>${s.lease_id || '—'}</code></td>
            <td>${when(s.checked_out_at)}</td><td>${when(s.expires_at)}</td>
            <td class="actions">${!s.available && html`
              ${allows(caps[`${mount}library/${name}/check-in`], 'update', 'create') && html`<button onClick=${() => act(() => api('POST', `${mount}library/${name}/check-in`, { service_account_names: [a] }), `Checked in ${a}.`)}>Check in</button>`}
              ${allows(caps[`${mount}library/manage/${name}/check-in`], 'update', 'create') && html`<${Confirm} label="Force check-in" question=${`Force ${a} back into ${name}? Its borrower loses it now.`} onConfirm=${() => act(() => api('POST', `${mount}library/manage/${name}/check-in`, { service_account_names: [a] }), `Checked in ${a} (forced).`)} />`}`}
            </td></tr>`;
        })}</tbody></table>
      </section>`;
    })}`;
}
