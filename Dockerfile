# syntax=docker/dockerfile:1
# Strongroom: production image. Node 24 runs the TypeScript sources directly (native type stripping),
# so there is no build step; the first stage only installs production dependencies.
# test/integration/container-smoke.test.ts repeats these steps (production install, start, HEALTHCHECK).

FROM node:24-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

FROM node:24-slim
ENV NODE_ENV=production \
    STRONGROOM_ADDR=0.0.0.0:8200 \
    STRONGROOM_STORAGE=sqlite:/data/strongroom.db
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY src ./src
# /var/log/strongroom: for a file audit device's volume (docs/audit.md), created owned by node like /data.
RUN mkdir -p /data /var/log/strongroom && chown node:node /data /var/log/strongroom
USER node
VOLUME ["/data"]
EXPOSE 8200
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8200/v1/sys/health').then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))"]
CMD ["node", "--disable-warning=ExperimentalWarning", "src/main.ts"]
