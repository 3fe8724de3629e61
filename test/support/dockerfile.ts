/**
 * Reads a Dockerfile's instructions, so tests can perform and check its steps without a Docker engine. Enough of
 * the format for our two Dockerfiles: line continuations, comments, stages, JSON (exec) forms and COPY's --from.
 */
import { readFileSync } from 'node:fs';

export interface Instruction {
  keyword: string;
  /** Everything after the keyword, continuations joined. */
  args: string;
}

export interface Stage {
  image: string;
  name?: string;
  instructions: Instruction[];
}

export interface Copy {
  /** The stage copied from (`--from=deps`), or undefined for the build context. */
  from?: string;
  sources: string[];
  dest: string;
}

export function readDockerfile(path: string): Stage[] {
  const text = readFileSync(path, 'utf8').replace(/\\\n(\s*#.*\n)*\s*/g, ' ');
  const stages: Stage[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*([A-Za-z]+)\s+(.*?)\s*$/.exec(line);
    if (!m || line.trimStart().startsWith('#')) continue;
    const keyword = m[1].toUpperCase();
    if (keyword === 'FROM') {
      const [image, as, name] = m[2].split(/\s+/);
      stages.push({ image, name: as?.toUpperCase() === 'AS' ? name : undefined, instructions: [] });
    } else {
      if (!stages.length) continue; // ARG before the first FROM
      stages.at(-1)!.instructions.push({ keyword, args: m[2] });
    }
  }
  return stages;
}

export function instructions(stage: Stage, keyword: string): string[] {
  return stage.instructions.filter((i) => i.keyword === keyword).map((i) => i.args);
}

/** `KEY=value KEY2="value 2"` of ENV or LABEL instructions. */
export function keyValuePairs(stage: Stage, keyword: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const args of instructions(stage, keyword)) {
    for (const m of args.matchAll(/([\w.-]+)=("(?:[^"\\]|\\.)*"|\S+)/g)) out[m[1]] = m[2].startsWith('"') ? JSON.parse(m[2]) : m[2];
  }
  return out;
}

/** The one instruction of its kind in the stage (CMD, HEALTHCHECK, USER, STOPSIGNAL...). */
export function only(stage: Stage, keyword: string): string {
  const found = instructions(stage, keyword);
  if (found.length !== 1) throw new Error(`expected one ${keyword} in the stage FROM ${stage.image}, found ${found.length}`);
  return found[0];
}

/** An exec-form argument list (`["node", "src/main.ts"]`). */
export function execForm(args: string): string[] {
  const list = JSON.parse(args) as unknown;
  if (!Array.isArray(list) || !list.every((a) => typeof a === 'string')) throw new Error(`expected an exec form, got ${args}`);
  return list;
}

export function copies(stage: Stage): Copy[] {
  return instructions(stage, 'COPY').map((args) => {
    const words = args.split(/\s+/);
    const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
    const paths = words.filter((w) => !w.startsWith('--'));
    return { from, sources: paths.slice(0, -1), dest: paths.at(-1)! };
  });
}

/** The HEALTHCHECK's options (`--interval=30s` as interval: '30s') and its command. */
export function healthcheck(stage: Stage): { options: Record<string, string>; command: string[] } {
  const m = /^((?:--[a-z-]+=\S+\s+)*)CMD\s+(\[.*\])$/.exec(only(stage, 'HEALTHCHECK'));
  if (!m) throw new Error('expected HEALTHCHECK [--option=value ...] CMD [exec form]');
  const options = Object.fromEntries(m[1].trim().split(/\s+/).filter(Boolean).map((o) => o.slice(2).split('=') as [string, string]));
  return { options, command: execForm(m[2]) };
}
