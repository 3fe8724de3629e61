// LDAP dynamic roles: TTLs and LDIF templates (read-only); Get credentials shows them once.
import { useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api, list } from '../session.ts';
import type { Mounts } from '../main.ts';
import { MountPicker, OneTime, Status, allows, capabilities, useLoad, useOutcome } from '../widgets.ts';

async function loadRoles(mount: string) {
  const names = (await list(`${mount}role`)).keys.filter((k) => !k.endsWith('/'));
  const [roles, caps, live] = await Promise.all([
    Promise.all(names.map((n) => api('GET', `${mount}role/${n}`).then((r) => r.data))),
    capabilities(names.map((n) => `${mount}creds/${n}`)),
    // Live leases need list on sys/leases/lookup, which an operator token may lack: then the count is not shown.
    Promise.all(names.map((n) => list(`sys/leases/lookup/${mount}creds/${n}/`).then((l) => l.keys.length, () => undefined))),
  ]);
  return names.map((name, i) => ({ name, role: roles[i], caps: caps[`${mount}creds/${name}`], live: live[i] }));
}

const TEMPLATES = ['creation_ldif', 'deletion_ldif', 'rollback_ldif', 'username_template'];

export function DynamicRoles({ mounts }: { mounts: Mounts }) {
  const [mount, setMount] = useState(mounts.ldap[0]);
  const [issued, setIssued] = useState<Array<[string, string, boolean]> | undefined>();
  const loaded = useLoad(() => loadRoles(mount), [mount]);
  const { view, run } = useOutcome();
  const get = async (name: string) => {
    const r = await run(() => api('GET', `${mount}creds/${name}`), `Issued credentials of ${name}.`);
    if (r) setIssued([['username', r.data.username, false], ['password', r.data.password, true], ['lease', r.lease_id, false], ['lease duration', `${r.lease_duration}s`, false]]);
    loaded.reload();
  };
  return html`<${MountPicker} mounts=${mounts.ldap} value=${mount} onChange=${setMount} />
    ${view}
    ${issued && html`<${OneTime} fields=${issued} onClose=${() => setIssued(undefined)} />`}
    <${Status} loaded=${loaded} />
    ${loaded.data?.length === 0 && html`<p class="muted">No dynamic roles.</p>`}
    ${loaded.data?.map(({ name, role, caps, live }) => html`<section class="set" data-role=${name} aria-labelledby=${`dyn-${name}`}>
      <h2 id=${`dyn-${name}`}>${name}</h2>
      <p>default ttl ${role.default_ttl}s · max ttl ${role.max_ttl}s${live === undefined ? '' : html` · <span data-testid="live">${live}</span> live lease(s)`}
        ${allows(caps, 'read') && html` <button onClick=${() => get(name)}>Get credentials</button>`}</p>
      ${TEMPLATES.filter((t) => role[t]).map((t) => html`<details><summary>${t}</summary><pre>${role[t]}</pre></details>`)}
    </section>`)}`;
}
