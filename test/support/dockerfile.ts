/**
 * Reads a Dockerfile's instructions, so tests can check what it names (base images, ENV, COPY sources) against the
 * files that depend on them. Enough of the format for our two Dockerfiles: line continuations, comments, stages and
 * COPY's --from.
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

export function copies(stage: Stage): Copy[] {
  return instructions(stage, 'COPY').map((args) => {
    const words = args.split(/\s+/);
    const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
    const paths = words.filter((w) => !w.startsWith('--'));
    return { from, sources: paths.slice(0, -1), dest: paths.at(-1)! };
  });
}
