/**
 * Vitest global setup of `npm run test:container`: the base images (made once per machine), then the Strongroom
 * image and examples/ldap's image built from their Dockerfiles, unchanged, under tags of this run's own. When the
 * run ends, everything the run made (its containers, their volumes, its two images) is removed by name, also after a
 * failure.
 */
import type {} from 'vitest';
import type { TestProject } from 'vitest/node';
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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
 * mounted over the build's /root (the home of root, who runs the deps stage), holding `.npmrc` (the configuration
 * files npm reads here, with the registry npm uses here) and the CA bundle npm trusts here (its cafile, or Node's
 * NODE_EXTRA_CA_CERTS: with the project's Node on PATH, npm's global configuration is the project's, not the
 * machine's). /root exists in the base image, so the mount leaves nothing behind (a file mounted where none exists
 * leaves an empty file in the layer); npm's cache goes there too and is cleaned by the RUN line, outside any layer.
 */
function npmHome(dir: string): string[] {
  const get = (key: string) => execFileSync('npm', ['config', 'get', key], { encoding: 'utf8' }).trim();
  const files = [get('globalconfig'), get('userconfig')].filter((f) => existsSync(f));
  const lines = [...files.map((f) => readFileSync(f, 'utf8').replace(/^\s*(cafile|registry)\s*=.*$/gm, '')), `registry=${get('registry')}`];
  const cafile = [get('cafile'), process.env.NODE_EXTRA_CA_CERTS].find((f) => f && f !== 'null' && existsSync(f));
  if (cafile) {
    copyFileSync(cafile, join(dir, 'ca.crt'));
    lines.push('cafile=/root/ca.crt');
  }
  writeFileSync(join(dir, '.npmrc'), `${lines.join('\n')}\n`, { mode: 0o600 });
  return ['--volume', `${dir}:/root`];
}

/** The end of npm's debug log of a failed build (it is written to the mounted home, which the teardown deletes). */
function npmLogTail(home: string): string {
  const dir = join(home, '.npm/_logs');
  const last = existsSync(dir) ? readdirSync(dir).sort().at(-1) : undefined;
  return last ? readFileSync(join(dir, last), 'utf8').split('\n').slice(-40).join('\n') : '';
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
    // One after the other: the machine's CPU is shared, and npm ci is what fails first under load.
    images.buildSeconds.strongroom = await build(images.strongroom, ROOT, npmHome(images.npmHome)).catch((e: Error) => {
      throw new Error(`${e.message}\n${npmLogTail(images.npmHome)}`);
    });
    images.buildSeconds.openldap = await build(images.openldap, `${ROOT}examples/ldap`, []);
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
