// Leases: browse by prefix (sys/leases/lookup), renew and revoke one, revoke a whole prefix after typing it back.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import { Confirm, Status, useLoad, useOutcome } from '../widgets.ts';

export function Leases() {
  const [prefix, setPrefix] = useState('');
  const [typed, setTyped] = useState('');
  const loaded = useLoad(() => list(`sys/leases/lookup/${prefix}`), [prefix]);
  const { view, run } = useOutcome();
  const act = async (what: () => Promise<unknown>, done: string) => {
    await run(what, done);
    loaded.reload();
  };
  const up = prefix.replace(/[^/]+\/$/, '');
  return html`<form class="row" onSubmit=${(e: Event) => { e.preventDefault(); setPrefix(typed && !typed.endsWith('/') ? `${typed}/` : typed); }}>
      <label>Prefix <input value=${typed} placeholder="ldap/creds/" onInput=${(e: Event) => setTyped((e.target as HTMLInputElement).value)} /></label>
      <button type="submit">Browse</button>
    </form>
    <p>Showing <code data-testid="prefix">${prefix || '(all)'}</code>
      ${prefix && html` <button onClick=${() => { setPrefix(up); setTyped(up); }}>Up</button>`}
      ${prefix && html` <${Confirm} label="Revoke prefix" typed=${prefix} question=${`Revoke every lease under ${prefix}?`} onConfirm=${() => act(() => api('PUT', `sys/leases/revoke-prefix/${prefix}`, {}), `Revoked every lease under ${prefix}.`)} />`}</p>
    ${view}
    <${Status} loaded=${loaded} />
    <ul class="leases" data-testid="leases">${(loaded.data?.keys ?? []).map((key) => key.endsWith('/')
      ? html`<li><button class="link" onClick=${() => { setPrefix(prefix + key); setTyped(prefix + key); }}>${key}</button></li>`
      : html`<li data-lease=${prefix + key}><code>${prefix + key}</code>
          <button onClick=${() => act(() => api('PUT', 'sys/leases/renew', { lease_id: prefix + key }), `Renewed ${prefix + key}.`)}>Renew</button>
          <${Confirm} label="Revoke" question=${`Revoke ${prefix + key}?`} onConfirm=${() => act(() => api('PUT', 'sys/leases/revoke', { lease_id: prefix + key }), `Revoked ${prefix + key}.`)} /></li>`)}
    </ul>
    ${loaded.data && loaded.data.keys.length === 0 && html`<p class="muted">No leases under this prefix.</p>`}`;
}
