/**
 * The base images the two Dockerfiles name, made on this machine because no container registry is reachable here,
 * once per machine (kept in podman's storage, under the names the Dockerfiles use, so they build unchanged with
 * `--pull=never`):
 *
 * - `debian:<suite>-slim`: `debootstrap --variant=minbase` from the Debian mirror this machine's apt uses, trimmed as
 *   the official slim image is (no documentation, manual pages or translations, and dpkg told to keep it so);
 * - `node:<major>-slim`: that plus the Node binary the project pins (the `node` npm package's platform package, from
 *   the npm registry), the npm that Node release bundles, the official image's entrypoint and its `node` user
 *   (UID and GID 1000).
 *
 * `.ci/run` runs it before the container tests (`node test/support/base-images.ts`); their global setup calls it too.
 */
import { execFile } from 'node:child_process';
import { chmodSync, cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { readDockerfile } from './dockerfile.ts';
import { HOST_FLAGS, imageExists, podman } from './podman.ts';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A Dockerfile's short name (`node:24-slim`) as podman stores it, so `FROM` resolves without a registry. */
const qualified = (image: string) => (image.includes('/') ? image : `docker.io/library/${image}`);
const fromOf = (dockerfile: string) => qualified(readDockerfile(join(ROOT, dockerfile))[0].image);

export const DEBIAN_IMAGE = fromOf('examples/ldap/Dockerfile');
export const NODE_IMAGE = fromOf('Dockerfile');

function run(command: string, args: string[], opts: { cwd?: string; timeoutMs: number }): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd: opts.cwd, timeout: opts.timeoutMs, maxBuffer: 64 << 20, killSignal: 'SIGKILL' }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${command} ${args.join(' ')} failed: ${(stderr || err.message).slice(-3000)}`));
      else resolve(stdout);
    });
  });
}

/** The mirror this machine's apt fetches `suite` from (one-line and deb822 sources both). */
export function aptMirror(suite: string): string {
  const dir = '/etc/apt/sources.list.d';
  const files = ['/etc/apt/sources.list', ...readdirSync(dir).filter((f) => /\.(list|sources)$/.test(f)).map((f) => join(dir, f))];
  for (const file of files) {
    let text: string;
    try { text = readFileSync(file, 'utf8'); } catch { continue; }
    for (const m of text.matchAll(/^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/gm)) if (m[2] === suite) return m[1];
    for (const stanza of text.split(/\n\s*\n/)) {
      const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza)?.[1].trim().split(/\s+/) ?? [];
      if (field('Types').includes('deb') && field('Suites').includes(suite) && field('URIs').length) return field('URIs')[0];
    }
  }
  throw new Error(`no apt source on this machine serves Debian ${suite}: the base image needs its mirror`);
}

/** What the official slim images leave out, as their dpkg configuration says (debuerreotype's "slimify"). */
const SLIM_DPKG = `path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/man/*
`;

async function makeDebian(work: string): Promise<void> {
  const suite = /:([a-z]+)-slim$/.exec(DEBIAN_IMAGE)?.[1];
  if (!suite) throw new Error(`${DEBIAN_IMAGE} is not a debian:<suite>-slim image`);
  const rootfs = join(work, 'rootfs');
  await run('debootstrap', ['--variant=minbase', suite, rootfs, aptMirror(suite)], { timeoutMs: 15 * 60_000 });
  writeFileSync(join(rootfs, 'etc/dpkg/dpkg.cfg.d/docker'), SLIM_DPKG);
  await run('sh', ['-c', `cd "$1" && find usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete && find usr/share/doc -mindepth 1 -type d -empty -delete
    rm -rf usr/share/groff/* usr/share/info/* usr/share/linda/* usr/share/lintian/overrides/* usr/share/man/* var/lib/apt/lists/* var/cache/apt/*.bin var/cache/apt/archives/*.deb var/log/*.log
    find usr/share/locale -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +`, 'slim', rootfs], { timeoutMs: 120_000 });
  const tarball = join(work, 'rootfs.tar');
  await run('tar', ['--numeric-owner', '-C', rootfs, '-cf', tarball, '.'], { timeoutMs: 300_000 });
  await podman(['import', '--change', 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '--change', 'CMD ["bash"]', tarball, DEBIAN_IMAGE], { timeoutMs: 300_000 });
}

/** The official image's entrypoint: a first argument that is not a command runs with node; then `exec`, so PID 1 is node. */
const NODE_ENTRYPOINT = `#!/bin/sh
set -e
if [ "\${1#-}" != "\${1}" ] || [ -z "$(command -v "\${1}")" ] || { [ -f "\${1}" ] && ! [ -x "\${1}" ]; }; then
  set -- node "$@"
fi
exec "$@"
`;

/** Fetches `spec` through this machine's npm configuration (registry, CA) and unpacks it; returns the package directory. */
async function npmPackage(spec: string, work: string): Promise<string> {
  const [packed] = JSON.parse(await run('npm', ['pack', spec, '--json', '--pack-destination', work], { cwd: work, timeoutMs: 300_000 })) as Array<{ filename: string }>;
  const dir = join(work, packed.filename.replace(/\.tgz$/, ''));
  mkdirSync(dir);
  await run('tar', ['-xzf', join(work, packed.filename), '-C', dir, '--strip-components=1'], { timeoutMs: 120_000 });
  return dir;
}

async function makeNode(work: string): Promise<void> {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { version: string }> };
  const version = lock.packages['node_modules/node'].version;
  const major = /:(\d+)-slim$/.exec(NODE_IMAGE)?.[1];
  if (major !== version.split('.')[0]) throw new Error(`${NODE_IMAGE} does not match the pinned node ${version}`);
  const node = await npmPackage(`node-${process.platform}-${process.arch}@${version}`, work);
  // Node's changelog lists its npm upgrades newest first: the first is the npm this release bundles.
  const npmVersion = /upgrade npm to (\d+\.\d+\.\d+)/.exec(readFileSync(join(node, 'CHANGELOG.md'), 'utf8'))?.[1];
  if (!npmVersion) throw new Error(`no npm version in node ${version}'s changelog`);
  const npm = await npmPackage(`npm@${npmVersion}`, work);
  const context = join(work, 'context');
  mkdirSync(context);
  cpSync(join(node, 'bin/node'), join(context, 'node'));
  cpSync(npm, join(context, 'npm'), { recursive: true });
  writeFileSync(join(context, 'docker-entrypoint.sh'), NODE_ENTRYPOINT);
  chmodSync(join(context, 'docker-entrypoint.sh'), 0o755);
  writeFileSync(join(context, 'Containerfile'), `FROM ${DEBIAN_IMAGE}
RUN groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node
ENV NODE_VERSION=${version}
COPY node /usr/local/bin/node
COPY npm /usr/local/lib/node_modules/npm
COPY docker-entrypoint.sh /usr/local/bin/
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \\
 && node --version && npm --version
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["node"]
`);
  await podman(['build', '--pull=never', ...HOST_FLAGS, '--layers=false', '--tag', NODE_IMAGE, context], { timeoutMs: 600_000 });
}

/** Makes whichever of the two base images podman does not hold yet. */
export async function ensureBaseImages(log: (line: string) => void = () => undefined): Promise<void> {
  for (const [image, make] of [[DEBIAN_IMAGE, makeDebian], [NODE_IMAGE, makeNode]] as const) {
    if (await imageExists(image)) continue;
    const started = performance.now();
    log(`making ${image} on this machine (once)…`);
    const work = mkdtempSync(join(tmpdir(), 'strongroom-base-'));
    try {
      await make(work);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
    log(`made ${image} in ${Math.round((performance.now() - started) / 1000)} s`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  await ensureBaseImages((line) => console.log(line));
}
