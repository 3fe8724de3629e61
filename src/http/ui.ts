import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, constants as zlib, gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The operator console (docs/console.md): the files `npm run build:ui` wrote to ui/dist, served at /ui/ from memory,
 * each encoding made once, at the first request that accepts it (at start, brotli at its best level cost ~100 ms of
 * CPU before the first health answer). Only the build's output is served: never the sources, never anything else.
 */
const DIST = fileURLToPath(new URL('../../ui/dist/', import.meta.url));

/**
 * Stricter than Vault's UI policy: nothing inline (no 'unsafe-inline' for scripts or styles, no eval), every fetch to
 * this origin only, no framing, and Trusted Types required, so an innerHTML write of any string throws in the browser.
 */
export const CONSOLE_CSP = [
  "default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'", "font-src 'self'",
  "object-src 'none'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'", "require-trusted-types-for 'script'", "trusted-types 'none'",
].join('; ');

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml',
};

type Encoding = 'br' | 'gzip';
interface Asset { type: string; raw: Buffer; encoded: Partial<Record<Encoding, Buffer>> }
const ENCODERS: Record<Encoding, (raw: Buffer) => Buffer> = {
  br: (raw) => brotliCompressSync(raw, { params: { [zlib.BROTLI_PARAM_QUALITY]: 11 } }),
  gzip: (raw) => gzipSync(raw, { level: 9 }),
};

function loadAssets(): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  if (!existsSync(DIST)) return assets;
  for (const name of readdirSync(DIST)) {
    const type = TYPES[extname(name)];
    if (!type) continue;
    const raw = readFileSync(join(DIST, name));
    assets.set(name, { type, raw, encoded: {} });
  }
  return assets;
}

function securityHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY')
    .header('cross-origin-opener-policy', 'same-origin')
    .header('cross-origin-resource-policy', 'same-origin');
}

function send(req: FastifyRequest, reply: FastifyReply, asset: Asset, cacheControl: string) {
  const accepted = String(req.headers['accept-encoding'] ?? '');
  const encoding: Encoding | undefined = /\bbr\b/.test(accepted) ? 'br' : /\bgzip\b/.test(accepted) ? 'gzip' : undefined;
  securityHeaders(reply).header('content-type', asset.type).header('cache-control', cacheControl).header('vary', 'accept-encoding');
  if (!encoding) return reply.send(asset.raw);
  reply.header('content-encoding', encoding);
  return reply.send(asset.encoded[encoding] ??= ENCODERS[encoding](asset.raw));
}

/** The console's routes: /ui redirects to /ui/, which is index.html; the rest are the build's assets by name. */
export function registerConsole(app: FastifyInstance): void {
  const assets = loadAssets();
  const notFound = (reply: FastifyReply, message: string, status = 404) =>
    securityHeaders(reply).status(status).header('cache-control', 'no-store').header('content-type', 'text/plain; charset=utf-8').send(message);
  app.get('/ui', (_req, reply) => securityHeaders(reply).header('cache-control', 'no-store').redirect('/ui/', 308));
  app.get('/ui/*', (req, reply) => {
    const name = (req.params as { '*': string })['*'].split('?', 1)[0] || 'index.html';
    const asset = assets.get(name);
    if (name === 'index.html' && !asset) return notFound(reply, 'The console is not built: run `npm run build:ui` (npm ci runs it).', 503);
    if (!asset) return notFound(reply, 'no such console file');
    // Asset names carry their content hash (ui/build.ts), so only the page itself must be fetched again.
    return send(req, reply, asset, name === 'index.html' ? 'no-store' : 'public, max-age=31536000, immutable');
  });
}
