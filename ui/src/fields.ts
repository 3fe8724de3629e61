// A configuration read as a definition list. Fields whose names say they hold a secret are left out even if an
// engine ever returned one: the console shows configuration, never credentials. Judged by how the name ends, so
// `bindpass` and `client_secret` go while `root_password_expiration_date` and `password_policy` stay.
import { html } from './html.ts';

const SECRET_NAME = /(pass|password|secret|token|key)$/i;

export const publicFields = (data: Record<string, unknown>): Array<[string, unknown]> =>
  Object.entries(data).filter(([k]) => !SECRET_NAME.test(k)).sort(([a], [b]) => a.localeCompare(b));

const shown = (v: unknown): string => (v === undefined || v === null || v === '' ? '—' : typeof v === 'object' ? JSON.stringify(v) : String(v));

export function Fields({ data, testid }: { data: Record<string, unknown>; testid?: string }) {
  return html`<dl class="facts" data-testid=${testid}>${publicFields(data).map(([k, v]) => html`<dt>${k}</dt><dd>${shown(v)}</dd>`)}</dl>`;
}
