/**
 * The shell blocks of README.md and docs/*.md as the doc test runs them (docs/doc-tests.md): every fenced block whose
 * info string is `sh`, `bash` or `shell` is a walkthrough step, run in document order; one whose info string adds
 * `no-run` (```sh no-run) is shown only. The one change allowed to a step's text: in a line `export NAME=value ...`,
 * the value of a NAME the caller overrides (a port, the root token) is replaced by the caller's.
 */
import { readFileSync } from 'node:fs';

export interface ShellBlock {
  /** Where the block's opening fence is: "README.md:33". */
  source: string;
  run: boolean;
  text: string;
}

const FENCE = /^(`{3,}|~{3,})\s*(\S*)\s*(.*)$/;
const SHELLS = new Set(['sh', 'bash', 'shell']);

/** The shell blocks of a Markdown text, in order; any info word after the language but `no-run` is an error. */
export function shellBlocks(markdown: string, name: string): ShellBlock[] {
  const lines = markdown.split('\n');
  const blocks: ShellBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = FENCE.exec(lines[i]);
    if (!open) continue;
    const [, fence, lang, rest] = open;
    const body: string[] = [];
    let j = i + 1;
    while (j < lines.length && !(lines[j].startsWith(fence) && lines[j].slice(fence.length).trim() === '')) body.push(lines[j++]);
    if (j === lines.length) throw new Error(`${name}:${i + 1}: the code block never closes`);
    if (SHELLS.has(lang)) {
      if (rest !== '' && rest !== 'no-run') throw new Error(`${name}:${i + 1}: unknown marker "${rest}" (a shell block is run, or marked no-run)`);
      blocks.push({ source: `${name}:${i + 1}`, run: rest === '', text: body.join('\n') });
    }
    i = j;
  }
  return blocks;
}

export function fileBlocks(path: string, name: string): ShellBlock[] {
  return shellBlocks(readFileSync(path, 'utf8'), name);
}

/** Replaces, in `export` lines only, the values of the names in `overrides`; other text is left as written. */
export function overrideExports(text: string, overrides: Record<string, string>): string {
  return text.split('\n').map((line) => {
    if (!/^\s*export\s/.test(line)) return line;
    return line.replace(/(?<=\s)([A-Za-z_][A-Za-z0-9_]*)=(\S*)/g, (whole, key: string) =>
      Object.hasOwn(overrides, key) ? `${key}=${overrides[key]}` : whole);
  }).join('\n');
}

/** Marks each block on stderr before it runs, so a failure names the block it happened in. */
export const BLOCK_MARK = '::doc-block ';

/** One bash script of the run blocks, in order, stopping at the first command that fails. */
export function walkthroughScript(blocks: ShellBlock[], overrides: Record<string, string>): string {
  // On a line of its own: a block's output need not end with a newline.
  const mark = (what: string): string => `printf '\\n%s\\n' '${BLOCK_MARK}${what}' >&2`;
  const steps = blocks.filter((b) => b.run).map((b) => `${mark(b.source)}\n${overrideExports(b.text, overrides)}`);
  return ['set -euo pipefail', ...steps, mark('end'), ''].join('\n');
}
