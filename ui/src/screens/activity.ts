// Activity over the last hour, drawn with uPlot from sys/metrics (Prometheus text). The server keeps counters, not
// history, so the page samples them every SAMPLE_MS while it is open and charts the rate between samples; the
// samples live in this module, so they survive switching screens but not a reload.
import 'uplot/dist/uPlot.min.css';
import uPlot from 'uplot';
import { useEffect, useRef, useState } from 'preact/hooks';
import { html } from '../html.ts';
import { api } from '../session.ts';
import { message } from '../widgets.ts';

const SAMPLE_MS = 10_000;
const KEEP = 360; // one hour of samples

interface Sample { t: number; requests: number; rotationsOk: number; rotationsFailed: number; refused: number; waiters: number; lent: number }

/** Sum of a family's samples whose labels contain `having` (e.g. `result="success"`). */
function total(text: string, name: string, having = ''): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name) || (line[name.length] !== '{' && line[name.length] !== ' ')) continue;
    if (having && !line.includes(having)) continue;
    const value = Number(line.slice(line.lastIndexOf(' ') + 1));
    if (Number.isFinite(value)) sum += value;
  }
  return sum;
}

const samples: Sample[] = [];

async function sample(): Promise<void> {
  const text: string = await api('GET', 'sys/metrics?format=prometheus');
  samples.push({
    t: Date.now() / 1000,
    requests: total(text, 'strongroom_request_duration_seconds_count'),
    rotationsOk: total(text, 'strongroom_ldap_static_role_rotations_total', 'result="success"'),
    rotationsFailed: total(text, 'strongroom_ldap_static_role_rotations_total', 'result="failure"'),
    refused: total(text, 'strongroom_ldap_library_checkouts_refused_total'),
    waiters: total(text, 'strongroom_ldap_library_waiters'),
    lent: total(text, 'strongroom_ldap_library_accounts', 'state="lent"'),
  });
  while (samples.length > KEEP) samples.shift();
}

/** Per-minute rate of a counter between consecutive samples (a restart's drop counts as zero). */
const rate = (pick: (s: Sample) => number) => samples.map((s, i) => (i === 0 ? null : Math.max(0, ((pick(s) - pick(samples[i - 1])) / (s.t - samples[i - 1].t)) * 60)));

const CHARTS: Array<{ title: string; series: Array<[string, string, () => Array<number | null>]> }> = [
  { title: 'Requests per minute', series: [['requests', '#2563eb', () => rate((s) => s.requests)]] },
  { title: 'Static-role rotations per minute', series: [['succeeded', '#15803d', () => rate((s) => s.rotationsOk)], ['failed', '#b91c1c', () => rate((s) => s.rotationsFailed)]] },
  { title: 'Library: accounts lent, waiters, refusals per minute', series: [['lent', '#7c3aed', () => samples.map((s) => s.lent)], ['waiting', '#c2410c', () => samples.map((s) => s.waiters)], ['refused', '#b91c1c', () => rate((s) => s.refused)]] },
];

function Chart({ title, series, round }: (typeof CHARTS)[number] & { round: number }) {
  const el = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | undefined>(undefined);
  const data = () => [samples.map((s) => s.t), ...series.map(([, , values]) => values())] as uPlot.AlignedData;
  useEffect(() => {
    plot.current = new uPlot({
      width: Math.min(900, (el.current!.parentElement?.clientWidth ?? 900) - 16), height: 200,
      series: [{}, ...series.map(([label, stroke]) => ({ label, stroke, width: 2, spanGaps: true }))],
      axes: [{}, { size: 50 }],
    }, data(), el.current!);
    return () => plot.current?.destroy();
  }, []);
  useEffect(() => plot.current?.setData(data()), [round]);
  return html`<figure><figcaption>${title}</figcaption><div ref=${el} role="img" aria-label=${`${title}, ${samples.length} samples`}></div></figure>`;
}

export function Activity() {
  const [round, setRound] = useState(0);
  const [error, setError] = useState<string | undefined>();
  useEffect(() => {
    const take = () => sample().then(() => { setError(undefined); setRound((r) => r + 1); }, (err) => setError(message(err)));
    void take();
    const timer = setInterval(take, SAMPLE_MS);
    return () => clearInterval(timer);
  }, []);
  return html`<p class="muted">Sampled from sys/metrics every ${SAMPLE_MS / 1000} s while this page is open (the server keeps no history);
      <span data-testid="samples">${samples.length}</span> sample(s), up to the last hour.</p>
    ${error && html`<p class="error" role="alert">${error}</p>`}
    ${CHARTS.map((c) => html`<${Chart} ...${c} round=${round} />`)}`;
}
