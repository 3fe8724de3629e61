# syntax=docker/dockerfile:1
# Strongroom: production image. Node 24 runs the TypeScript sources directly (native type stripping),
# so the server has no build step; the first stage installs production dependencies, the second builds the console.
# test/container/ builds it with podman and runs it as compose.yaml and examples/ci/ do; docs/container.md explains
# each choice.

FROM node:24-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
# Source maps and type declarations are never read at run time: 37 of the install's 85 MB.
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force && find node_modules -type f \( -name '*.map' -o -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \) -delete

# The operator console (docs/console.md): bundled by esbuild, a development dependency, so in a stage of its own;
# only its output, ui/dist, reaches the image.
FROM node:24-slim AS ui
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY ui ./ui
RUN node ui/build.ts

FROM node:24-slim
ARG VERSION=0.1.0
ARG SOURCE=https://github.com/strongroom/strongroom
LABEL org.opencontainers.image.title="strongroom" \
      org.opencontainers.image.description="A secrets server that speaks the Vault-style HTTP API: cloud (Azure) secrets, cloud JWT auth, LDAP secrets" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="MPL-2.0" \
      org.opencontainers.image.version="${VERSION}"
ENV NODE_ENV=production \
    NODE_COMPILE_CACHE=/app/compile-cache \
    STRONGROOM_ADDR=0.0.0.0:8200 \
    STRONGROOM_STORAGE=sqlite:/data/strongroom.db \
    STRONGROOM_AUDIT_DIR=/var/log/strongroom
WORKDIR /app
# Nothing runs npm, yarn or corepack at run time, so they are not left for anyone else to run.
# /data and /var/log/strongroom (a file audit device's volume, docs/audit.md) are the only writable paths.
RUN rm -rf /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
        /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-* \
 && mkdir -p /data /var/log/strongroom && chown 1000:1000 /data /var/log/strongroom
# Owned by root, so the server cannot change its own code even where the root filesystem is writable.
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY src ./src
COPY --from=ui /app/ui/dist ./ui/dist
# The example bootstrap file, for CI service containers, which start before the repository is checked out.
COPY examples/bootstrap ./examples/bootstrap
# Node's compile cache (docs/container.md "Compile cache"): every module the server loads, stripped and compiled once
# here (`--version` loads all a start loads before it listens and starts nothing; then what it loads later or only when
# needed: the bootstrap, the PostgreSQL store, the engines, the token store's paths, the OpenAPI writer,
# src/lib/first-use.ts's packages), so that a container's first start need not. Made as the image's user, since Node
# keeps one cache per user id, then handed to root: the server reads it and cannot change it.
RUN mkdir compile-cache && chown 1000:1000 compile-cache \
 && setpriv --reuid=1000 --regid=1000 --clear-groups node --disable-warning=ExperimentalWarning src/main.ts --version \
 && setpriv --reuid=1000 --regid=1000 --clear-groups node --disable-warning=ExperimentalWarning --input-type=module -e \
      "const [, , , , , later] = await Promise.all(['./src/bootstrap/run.ts', './src/core/storage/postgres.ts', './src/engines.ts', './src/builtin/token/index.ts', './src/core/openapi.ts', './src/lib/first-use.ts'].map((m) => import(m))); later.jose(); later.cronParser(); later.promClient(); later.ws();" \
 && chown -R root:root compile-cache && chmod -R a+rX,go-w compile-cache
# The base image's node user, by number so that Kubernetes' runAsNonRoot can verify it.
USER 1000:1000
VOLUME ["/data", "/var/log/strongroom"]
EXPOSE 8200
# main.ts stops gracefully on SIGTERM (and SIGINT) and exits 0; no init process is needed (docs/container.md).
STOPSIGNAL SIGTERM
# The port comes from STRONGROOM_ADDR, so the probe follows a listener moved off 8200 (a container on the host's
# network, as test/container/ runs it).
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + process.env.STRONGROOM_ADDR.split(':').pop() + '/v1/sys/health').then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))"]
CMD ["node", "--disable-warning=ExperimentalWarning", "src/main.ts"]
