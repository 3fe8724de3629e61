// Builds the operator console (docs/console.md) into ui/dist: one script and one stylesheet, minified, named by
// their content hash, and the page that loads them. `npm ci` runs it (the prepare script); src/http/ui.ts serves
// ui/dist and nothing else.
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';

// esbuild is a development dependency: a production install (`npm ci --omit=dev`) runs this script without it, and
// must not fail for it. The server then answers /ui/ with a 503 saying how to build the console.
let build: typeof import('esbuild').build;
try {
  ({ build } = await import('esbuild'));
} catch {
  process.stderr.write('ui/build.ts: esbuild is not installed (a production install?): the console is not built\n');
  process.exit(0);
}

const root = fileURLToPath(new URL('.', import.meta.url));
const outdir = `${root}dist`;
rmSync(outdir, { recursive: true, force: true });
mkdirSync(outdir, { recursive: true });

const result = await build({
  entryPoints: [`${root}src/main.ts`],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  outdir,
  entryNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const script = outputs.find((f) => f.endsWith('.js'));
const style = outputs.find((f) => f.endsWith('.css'));
if (!script || !style) throw new Error(`ui build: expected one .js and one .css output, got ${outputs.join(', ')}`);

// No inline script or style anywhere: the CSP forbids both.
writeFileSync(`${outdir}/index.html`, `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Strongroom console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${style}">
<script type="module" src="${script}"></script>
</head>
<body><div id="app"></div></body>
</html>
`);
