// LDAP config health: the connection settings (no bind password), root rotation times, drift verification; Rotate root.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import type { Mounts } from '../main.ts';
import { Fields } from '../fields.ts';
import { Confirm, MountPicker, Status, allows, capabilities, useLoad, useOutcome } from '../widgets.ts';

async function loadConfig(mount: string) {
  const [config, failures, caps] = await Promise.all([
    api('GET', `${mount}config`).then((r) => r.data as Record<string, unknown>),
    list(`${mount}rotation-failures`).catch(() => ({ keys: [] as string[] })),
    capabilities([`${mount}rotate-root`]),
  ]);
  return { config, failures: failures.keys, caps };
}

export function LdapConfig({ mounts }: { mounts: Mounts }) {
  const [mount, setMount] = useState(mounts.ldap[0]);
  const loaded = useLoad(() => loadConfig(mount), [mount]);
  const { view, run } = useOutcome();
  const d = loaded.data;
  return html`<${MountPicker} mounts=${mounts.ldap} value=${mount} onChange=${setMount} />
    ${view}
    <${Status} loaded=${loaded} />
    ${d && html`
      <p>${d.failures.length === 0 ? 'No rotation failure or drift reported.' : `${d.failures.length} rotation failure(s) or drifted account(s): ${d.failures.join(', ')}.`}</p>
      ${allows(d.caps[`${mount}rotate-root`], 'update', 'create') && html`<${Confirm} label="Rotate root" question="Give the bind account a new password now? Only the server will know it."
        onConfirm=${async () => { await run(() => api('POST', `${mount}rotate-root`, {}), 'Rotated the bind account\'s password.'); loaded.reload(); }} />`}
      <${Fields} data=${d.config} testid="ldap-config" />`}`;
}
