// Audit devices: path, type, description and their non-secret options.
import { html } from '../html.ts';
import { api } from '../session.ts';
import { Fields } from '../fields.ts';
import { Status, useLoad } from '../widgets.ts';

export function AuditDevices() {
  const loaded = useLoad(() => api('GET', 'sys/audit').then((r) => (r?.data ?? {}) as Record<string, any>), []);
  const devices = Object.entries(loaded.data ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return html`<${Status} loaded=${loaded} />
    ${loaded.data && devices.length === 0 && html`<p class="muted">No audit device is enabled.</p>`}
    <table data-testid="audit"><thead><tr><th scope="col">Path</th><th scope="col">Type</th><th scope="col">Description</th><th scope="col">Options</th></tr></thead>
    <tbody>${devices.map(([path, d]) => html`<tr><th scope="row"><code>${path}</code></th><td>${d.type}</td><td>${d.description}</td><td><${Fields} data=${d.options ?? {}} /></td></tr>`)}</tbody></table>`;
}
