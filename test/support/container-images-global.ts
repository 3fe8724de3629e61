/**
 * Vitest global setup of `npm run test:container`: the base images (made once per machine), then the Strongroom
 * image and examples/ldap's image built from their Dockerfiles, unchanged, under tags of this run's own. When the
 * run ends, everything the run made (its containers, their volumes, its two images) is removed by name, also after a
 * failure.
 */
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ensureBaseImages, NODE_IMAGE } from './base-images.ts';
import { runPrefix, type BuiltImages } from './containers.ts';
import { HOST_FLAGS, imageSize, podman, removeAll } from './podman.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    images: BuiltImages;
  }
}

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** Builds `context` into `tag` with podman; its time in seconds. */
async function build(tag: string, context: string, extra: string[]): Promise<number> {
  const started = performance.now();
  // docker format: OCI images have no HEALTHCHECK, so podman's default format would drop the Dockerfile's.
  await podman(['build', '--pull=never', '--format', 'docker', '--layers=false', ...HOST_FLAGS, ...extra, '--tag', tag, context], { timeoutMs: 600_000 });
  return (performance.now() - started) / 1000;
}

/**
 * The machine's npm configuration and CA bundle, for the build's RUN steps only: a directory of the test's own
 * mounted over the build's /root (the home of root, who runs the deps stage), holding `.npmrc` (this machine's global
 * and user configuration, its cafile moved to the copy) and the CA bundle. /root exists in the base image, so the
 * mount leaves nothing behind (a file mounted where none exists leaves an empty file in the layer); npm's cache goes
 * there too and is cleaned by the RUN line, outside any layer.
 */
function npmHome(dir: string): string[] {
  const get = (key: string) => execFileSync('npm', ['config', 'get', key], { encoding: 'utf8' }).trim();
  const files = [get('globalconfig'), get('userconfig')].filter((f) => existsSync(f));
  let npmrc = files.map((f) => readFileSync(f, 'utf8')).join('\n').replace(/^\s*cafile\s*=.*$/gm, '');
  const cafile = get('cafile');
  if (cafile && cafile !== 'null' && existsSync(cafile)) {
    copyFileSync(cafile, join(dir, 'ca.crt'));
    npmrc += '\ncafile=/root/ca.crt\n';
  }
  writeFileSync(join(dir, '.npmrc'), npmrc, { mode: 0o600 });
  return ['--volume', `${dir}:/root`];
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  await ensureBaseImages((line) => console.log(line));
  const runId = `${process.pid}-${Date.now().toString(36)}`;
  const images: BuiltImages = {
    runId,
    strongroom: `localhost/strongroom-test:${runId}`,
    openldap: `localhost/strongroom-openldap-test:${runId}`,
    npmHome: mkdtempSync(join(tmpdir(), 'strongroom-build-home-')),
    buildSeconds: {},
    sizes: {},
  };
  const teardown = async () => {
    const listed = await podman(['ps', '--all', '--format', '{{.Names}}', '--filter', `name=^${runPrefix(runId)}`]).catch(() => ({ stdout: '' }));
    await removeAll('container', listed.stdout.split('\n').filter(Boolean));
    const volumes = await podman(['volume', 'ls', '--format', '{{.Name}}', '--filter', `name=^${runPrefix(runId)}`]).catch(() => ({ stdout: '' }));
    await removeAll('volume', volumes.stdout.split('\n').filter(Boolean));
    await removeAll('image', [images.strongroom, images.openldap]);
    rmSync(images.npmHome, { recursive: true, force: true });
  };
  try {
    const [strongroom, openldap] = await Promise.all([
      build(images.strongroom, ROOT, npmHome(images.npmHome)),
      build(images.openldap, `${ROOT}examples/ldap`, []),
    ]);
    images.buildSeconds = { strongroom, openldap };
    for (const ref of [images.strongroom, images.openldap, NODE_IMAGE]) images.sizes[ref] = await imageSize(ref);
  } catch (e) {
    await teardown();
    throw e;
  }
  console.log(`built in ${images.buildSeconds.strongroom?.toFixed(0)} s (Strongroom) and ${images.buildSeconds.openldap?.toFixed(0)} s (OpenLDAP); ` +
    Object.entries(images.sizes).map(([ref, bytes]) => `${ref} ${(bytes / 1e6).toFixed(1)} MB`).join(', '));
  project.provide('images', images);
  return teardown;
}
