// Small shared pieces of the screens: loading state, action buttons with their outcome, confirmation, masked secrets.
import { useEffect, useState } from 'preact/hooks';
import { html } from './html.ts';
import { api } from './session.ts';

export const message = (err: unknown): string => (err instanceof Error ? err.message : String(err));

export interface Loaded<T> { data?: T; error?: string; loading: boolean; reload: () => void }

/** Runs `load` when the dependencies change (or on reload); the latest answer wins. */
export function useLoad<T>(load: () => Promise<T>, deps: unknown[]): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: string; loading: boolean }>({ loading: true });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then((data) => live && setState({ data, loading: false }), (err) => live && setState({ error: message(err), loading: false }));
    return () => {
      live = false;
    };
  }, [...deps, round]);
  return { ...state, reload: () => setRound((r) => r + 1) };
}

/** The capabilities of the token on each path, from sys/capabilities-self (one request for all). */
export async function capabilities(paths: string[]): Promise<Record<string, string[]>> {
  if (paths.length === 0) return {};
  const r = await api('POST', 'sys/capabilities-self', { paths });
  return Object.fromEntries(paths.map((p) => [p, (r?.data?.[p] ?? r?.[p] ?? []) as string[]]));
}

export const allows = (caps: string[] | undefined, ...ops: string[]): boolean => !!caps && (caps.includes('root') || ops.some((op) => caps.includes(op)));

export function Status({ loaded }: { loaded: { error?: string; loading: boolean } }) {
  if (loaded.error) return html`<p class="error" role="alert">${loaded.error}</p>`;
  return loaded.loading ? html`<p class="muted" role="status">Loading…</p>` : null;
}

/** The outcome of the last action of a screen: a success line or the API's error, announced to screen readers. */
export function useOutcome() {
  const [outcome, setOutcome] = useState<{ ok: boolean; text: string } | undefined>();
  const view = outcome ? html`<p class=${outcome.ok ? 'ok' : 'error'} role=${outcome.ok ? 'status' : 'alert'} data-testid="outcome">${outcome.text}</p>` : null;
  const run = async <T,>(what: () => Promise<T>, done: string | ((r: T) => string)): Promise<T | undefined> => {
    try {
      const r = await what();
      setOutcome({ ok: true, text: typeof done === 'string' ? done : done(r) });
      return r;
    } catch (err) {
      setOutcome({ ok: false, text: message(err) });
      return undefined;
    }
  };
  return { view, run };
}

/**
 * A button that asks before it acts: a plain confirmation, or `typed` text the operator must type back exactly.
 * Inline rather than window.confirm, so it is styled, keyboard reachable and testable.
 */
export function Confirm({ label, question, typed, onConfirm, danger = true }: { label: string; question: string; typed?: string; onConfirm: () => void; danger?: boolean }) {
  const [open, setOpen] = useState(false);
  const [text, setText] = useState('');
  if (!open) return html`<button class=${danger ? 'danger' : ''} onClick=${() => setOpen(true)}>${label}</button>`;
  const ready = typed === undefined || text === typed;
  return html`<span class="confirm" role="group" aria-label=${question}>
    <span>${question}</span>
    ${typed !== undefined && html`<label>Type <code>${typed}</code> to confirm <input value=${text} onInput=${(e: Event) => setText((e.target as HTMLInputElement).value)} /></label>`}
    <button class="danger" disabled=${!ready} onClick=${() => { setOpen(false); setText(''); onConfirm(); }}>Confirm ${label.toLowerCase()}</button>
    <button onClick=${() => { setOpen(false); setText(''); }}>Cancel</button>
  </span>`;
}

/** A secret, masked until Reveal; Copy puts it on the clipboard without showing it. */
export function Secret({ value, label }: { value: string; label: string }) {
  const [shown, setShown] = useState(false);
  const [copied, setCopied] = useState(false);
  return html`<span class="secret">
    <code aria-label=${shown ? label : `${label} (hidden)`} data-testid="secret">${shown ? value : '••••••••••••'}</code>
    <button aria-pressed=${shown} onClick=${() => setShown(!shown)}>${shown ? 'Hide' : 'Reveal'}</button>
    <button onClick=${() => navigator.clipboard.writeText(value).then(() => setCopied(true), () => setCopied(false))}>${copied ? 'Copied' : 'Copy'}</button>
  </span>`;
}

/** Credentials the API hands out once: shown masked with a warning until dismissed. */
export function OneTime({ fields, onClose }: { fields: Array<[string, string, boolean]>; onClose: () => void }) {
  return html`<section class="onetime" aria-label="New credentials" data-testid="onetime">
    <p class="warn"><strong>Shown once.</strong> These credentials will not be shown again: copy them now.</p>
    <dl>${fields.map(([k, v, secret]) => html`<dt>${k}</dt><dd>${secret ? html`<${Secret} value=${v} label=${k} />` : html`<code>${v}</code>`}</dd>`)}</dl>
    <button onClick=${onClose}>Dismiss</button>
  </section>`;
}

export const when = (iso: unknown): string => {
  if (typeof iso !== 'string' || !iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
};

export function Badge({ kind, text }: { kind: 'ok' | 'bad' | 'warn' | 'off'; text: string }) {
  return html`<span class=${`badge ${kind}`}>${text}</span>`;
}

/** Several mounts of one type: which one the screen shows. */
export function MountPicker({ mounts, value, onChange }: { mounts: string[]; value: string; onChange: (m: string) => void }) {
  if (mounts.length < 2) return null;
  return html`<label>Mount <select value=${value} onChange=${(e: Event) => onChange((e.target as HTMLSelectElement).value)}>
    ${mounts.map((m) => html`<option value=${m}>${m}</option>`)}</select></label>`;
}
