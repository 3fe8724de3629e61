// Cloud engine: its config (no client secret), Rotate root, and its roles with Get credentials.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import type { Mounts } from '../main.ts';
import { Fields } from '../fields.ts';
import { Confirm, MountPicker, OneTime, Status, allows, capabilities, useLoad, useOutcome } from '../widgets.ts';

async function loadCloud(mount: string) {
  const names = (await list(`${mount}roles`)).keys;
  const [config, roles, caps] = await Promise.all([
    api('GET', `${mount}config`).then((r) => r.data as Record<string, unknown>, () => undefined),
    Promise.all(names.map((n) => api('GET', `${mount}roles/${n}`).then((r) => r.data as Record<string, unknown>))),
    capabilities([`${mount}rotate-root`, ...names.map((n) => `${mount}creds/${n}`)]),
  ]);
  return { config, roles: names.map((name, i) => ({ name, role: roles[i] })), caps };
}

export function Cloud({ mounts }: { mounts: Mounts }) {
  const [mount, setMount] = useState(mounts.cloud[0]);
  const [issued, setIssued] = useState<Array<[string, string, boolean]> | undefined>();
  const loaded = useLoad(() => loadCloud(mount), [mount]);
  const { view, run } = useOutcome();
  const d = loaded.data;
  const get = async (name: string) => {
    const r = await run(() => api('GET', `${mount}creds/${name}`), `Issued credentials of ${name}.`);
    if (r) setIssued([['client_id', r.data.client_id, false], ['client_secret', r.data.client_secret, true], ['lease', r.lease_id, false], ['lease duration', `${r.lease_duration}s`, false]]);
  };
  return html`<${MountPicker} mounts=${mounts.cloud} value=${mount} onChange=${setMount} />
    ${view}
    ${issued && html`<${OneTime} fields=${issued} onClose=${() => setIssued(undefined)} />`}
    <${Status} loaded=${loaded} />
    ${d && html`<section aria-labelledby="cloud-config"><h2 id="cloud-config">Configuration</h2>
      ${d.config ? html`<${Fields} data=${d.config} testid="cloud-config" />` : html`<p class="muted">Not configured, or not readable with this token.</p>`}
      ${d.config && allows(d.caps[`${mount}rotate-root`], 'update', 'create') && html`<${Confirm} label="Rotate root" question="Replace the engine's client secret now?"
        onConfirm=${async () => { await run(() => api('POST', `${mount}rotate-root`, {}), 'Rotated the engine\'s client secret.'); loaded.reload(); }} />`}
    </section>
    <section aria-labelledby="cloud-roles"><h2 id="cloud-roles">Roles</h2>
      ${d.roles.length === 0 && html`<p class="muted">No roles.</p>`}
      ${d.roles.map(({ name, role }) => html`<div class="set" data-role=${name}><h3>${name}</h3>
        ${allows(d.caps[`${mount}creds/${name}`], 'read') && html`<button onClick=${() => get(name)}>Get credentials</button>`}
        <details><summary>Settings of ${name}</summary><${Fields} data=${role} /></details></div>`)}
    </section>`}`;
}
