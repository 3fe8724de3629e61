// Events: the server's event stream (docs/events.md) shown live. The SSE endpoint authenticates with X-Vault-Token,
// which EventSource cannot send, so the stream is read with fetch() and a streaming reader: the token stays in a
// header, never in the URL.
import { useEffect, useState } from 'preact/hooks';
import { html } from '../html.ts';
import { ApiError, currentToken } from '../session.ts';
import { message, when } from '../widgets.ts';

interface Shown { sequence: number; time: string; type: string; path: string; name: string }

const KEEP = 100;
const PATTERN = /^[A-Za-z0-9_*/-]{1,128}$/;

/** One SSE frame's fields (`event`, `data`, `id`), data lines joined as the spec says. */
function parseFrame(frame: string): { event?: string; data: string } {
  let event: string | undefined;
  const data: string[] = [];
  for (const line of frame.split('\n')) {
    if (line.startsWith('event:')) event = line.slice(6).trim();
    else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
  }
  return { event, data: data.join('\n') };
}

function shown(e: any): Shown {
  const meta = e?.data?.metadata ?? {};
  return {
    sequence: Number(e?.sequence),
    time: String(e?.time ?? ''),
    type: String(e?.data?.event_type ?? ''),
    path: `${e?.data?.plugin_info?.mount_path ?? ''}${meta.path ?? ''}`,
    name: String(meta.name ?? meta.service_account ?? meta.account ?? ''),
  };
}

async function follow(pattern: string, signal: AbortSignal, onOpen: () => void, onEvent: (e: Shown) => void, onEnd: (why: string) => void) {
  const token = currentToken();
  const res = await fetch(`/v1/sys/events/stream/${pattern}`, {
    headers: token ? { 'X-Vault-Token': token, Accept: 'text/event-stream' } : { Accept: 'text/event-stream' },
    credentials: 'omit', cache: 'no-store', referrerPolicy: 'no-referrer', signal,
  });
  if (!res.ok || !res.body) {
    const body = await res.json().catch(() => undefined);
    throw new ApiError(res.status, Array.isArray(body?.errors) ? body.errors.map(String) : [res.statusText]);
  }
  onOpen();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return onEnd('The server ended the stream.');
    buffer += value.replace(/\r\n?/g, '\n');
    let cut: number;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const frame = parseFrame(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (!frame.data) continue;
      if (frame.event === 'unauthorised' || frame.event === 'overflow') return onEnd(`Stream closed (${frame.event}): ${JSON.parse(frame.data)?.reason ?? ''}`);
      onEvent(shown(JSON.parse(frame.data)));
    }
  }
}

export function Events() {
  const [draft, setDraft] = useState('*');
  const [pattern, setPattern] = useState('*');
  const [events, setEvents] = useState<Shown[]>([]);
  const [state, setState] = useState<{ live: boolean; text: string }>({ live: false, text: 'Connecting…' });
  useEffect(() => {
    const stop = new AbortController();
    setEvents([]);
    setState({ live: false, text: 'Connecting…' });
    follow(pattern, stop.signal, () => setState({ live: true, text: `Live: events of type ${pattern} since this screen opened.` }),
      (e) => setEvents((all) => [e, ...all].slice(0, KEEP)),
      (why) => setState({ live: false, text: why }),
    ).catch((err) => stop.signal.aborted || setState({ live: false, text: message(err) }));
    return () => stop.abort();
  }, [pattern]);
  const submit = (e: Event) => {
    e.preventDefault();
    if (PATTERN.test(draft.trim())) setPattern(draft.trim());
  };
  return html`<form class="filters" onSubmit=${submit} aria-label="Event type">
      <label>Event type (glob) <input value=${draft} required onInput=${(e: Event) => setDraft((e.target as HTMLInputElement).value)} /></label>
      <button type="submit">Follow</button>
    </form>
    <p class=${state.live ? 'ok' : 'muted'} role="status" data-testid="stream">${state.text}</p>
    ${events.length === 0 ? html`<p class="muted">No events yet.</p>` : html`<table data-testid="events"><thead><tr>
      <th scope="col">Sequence</th><th scope="col">Time</th><th scope="col">Type</th><th scope="col">Path</th><th scope="col">Name</th>
    </tr></thead><tbody>${events.map((e) => html`<tr key=${e.sequence} data-type=${e.type}>
      <td>${e.sequence}</td><td>${when(e.time)}</td><td><code>${e.type}</code></td><td><code>${e.path}</code></td><td>${e.name}</td></tr>`)}
    </tbody></table>`}`;
}
