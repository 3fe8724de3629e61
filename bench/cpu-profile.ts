/**
 * Summarises a V8 CPU profile (`node --cpu-prof`) per unit of work: `node bench/cpu-profile.ts FILE UNITS [TOP]` prints
 * the functions with the most self time and the most inclusive time (a function counted once per sample however
 * deep it recurs), in µs per unit (e.g. per cycle of bench/dynamic-http.ts, which prints the cycles it profiled), and
 * self time by source file. CALLERS=<text>: also the call paths (five frames up) into the functions whose label contains
 * <text>, by their inclusive time. FROM=<text>: samples before the first whose stack holds a function whose label
 * contains <text> (e.g. the request handler) are left out, which leaves out the process's start.
 */
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

// Piped into head: stop quietly when the reader is gone.
process.stdout.on('error', () => process.exit(0));
const [file, unitsArg, topArg] = process.argv.slice(2);
if (!file || !unitsArg) {
  process.stderr.write('usage: node bench/cpu-profile.ts FILE.cpuprofile UNITS [TOP]\n');
  process.exit(2);
}
const units = Number(unitsArg);
const top = Number(topArg ?? 30);
const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile;

const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const shortUrl = (url: string) => url.replace(/^file:\/\/.*?\/(src|bench|node_modules)\//, '$1/').replace(/^node:/, 'node:');
const label = (n: ProfileNode) => `${n.callFrame.functionName || '(anonymous)'} ${shortUrl(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;

const callersOf = process.env.CALLERS;
const from = process.env.FROM;
let started = from === undefined;
let skipped = 0;
const callers = new Map<string, number>();
const self = new Map<string, number>();
const inclusive = new Map<string, number>();
const byFile = new Map<string, number>();
let total = 0;
let idle = 0;
const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
profile.samples.forEach((id, i) => {
  const dt = profile.timeDeltas[i] ?? 0;
  const node = byId.get(id)!;
  if (!started) {
    for (let n: number | undefined = id; n !== undefined && !started; n = parent.get(n)) started = label(byId.get(n)!).includes(from!);
    if (!started) {
      skipped += dt;
      return;
    }
  }
  if (node.callFrame.functionName === '(idle)') {
    idle += dt;
    return;
  }
  total += dt;
  add(self, label(node), dt);
  add(byFile, shortUrl(node.callFrame.url) || node.callFrame.functionName, dt);
  const seen = new Set<string>();
  let path: string | undefined;
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
    const l = label(byId.get(n)!);
    if (!seen.has(l)) {
      seen.add(l);
      add(inclusive, l, dt);
    }
    if (callersOf && path === undefined && l.includes(callersOf)) {
      const frames: string[] = [];
      for (let up: number | undefined = n; up !== undefined && frames.length < Number(process.env.DEPTH ?? 6); up = parent.get(up)) frames.push(label(byId.get(up)!));
      path = frames.join(' < ');
    }
  }
  if (path) add(callers, path, dt);
});

const per = (us: number) => (us / units).toFixed(1).padStart(8);
const list = (title: string, m: Map<string, number>) => {
  process.stdout.write(`\n${title} (µs per unit)\n`);
  for (const [k, v] of [...m].sort((x, y) => y[1] - x[1]).slice(0, top)) process.stdout.write(`${per(v)}  ${k}\n`);
};
process.stdout.write(`${file}: ${(skipped / 1000).toFixed(0)} ms before FROM left out; ${(total / 1000).toFixed(0)} ms busy, ${(idle / 1000).toFixed(0)} ms idle; ${per(total)} µs busy per unit over ${units} units\n`);
list('self time', self);
list('inclusive time', inclusive);
list('self time by file', byFile);
if (callersOf) list(`paths into "${callersOf}"`, callers);
