// Overview: the node (health, seal, HA role and leader) and the mounts the token can use.
import { html } from '../html.ts';
import { api } from '../session.ts';
import type { Mounts } from '../main.ts';
import { Badge, Status, useLoad } from '../widgets.ts';

async function loadNode() {
  // Read without the API client: sys/health answers a sealed or uninitialised node with a 5xx status and the same
  // JSON body, which is what this screen shows. standbyok: a standby answers 200 like the leader.
  const health = fetch('/v1/sys/health?standbyok=true&perfstandbyok=true', { cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' }).then((r) => r.json());
  const [h, leader] = await Promise.all([
    health,
    api('GET', 'sys/leader').catch(() => undefined),
  ]);
  return { health: h, leader };
}

export function Overview({ mounts }: { mounts: Mounts }) {
  const node = useLoad(loadNode, []);
  const h = node.data?.health;
  const l = node.data?.leader;
  const rows = (kind: 'secret' | 'auth') => Object.entries(mounts.all[kind] ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return html`<section aria-labelledby="node-h">
      <h2 id="node-h">This node</h2>
      <${Status} loaded=${node} />
      ${h && html`<dl class="facts" data-testid="node">
        <dt>Health</dt><dd>${h.sealed ? html`<${Badge} kind="bad" text="sealed" />` : html`<${Badge} kind="ok" text="unsealed" />`} ${h.initialized ? '' : html`<${Badge} kind="bad" text="not initialised" />`}</dd>
        <dt>Role</dt><dd data-testid="role">${h.standby ? 'standby' : 'active'}${l?.ha_enabled ? (l.is_self ? ' (leader)' : ' (follower)') : ' (single node)'}</dd>
        <dt>Leader</dt><dd>${l?.leader_address || (l?.ha_enabled ? 'unknown' : 'this node')}</dd>
        <dt>Version</dt><dd>${h.version ?? '—'}</dd>
        <dt>Cluster</dt><dd>${h.cluster_name ?? '—'}</dd>
      </dl>`}
    </section>
    ${(['secret', 'auth'] as const).map((kind) => html`<section aria-labelledby=${`m-${kind}`}>
      <h2 id=${`m-${kind}`}>${kind === 'secret' ? 'Secrets engines' : 'Auth methods'}</h2>
      <table data-testid=${`mounts-${kind}`}><thead><tr><th scope="col">Path</th><th scope="col">Type</th><th scope="col">Description</th></tr></thead>
      <tbody>${rows(kind).map(([path, m]: [string, any]) => html`<tr><td><code>${kind === 'auth' ? `auth/${path}` : path}</code></td><td>${m.type}</td><td>${m.description}</td></tr>`)}</tbody></table>
    </section>`)}`;
}
