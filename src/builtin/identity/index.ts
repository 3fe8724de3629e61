import type { Core } from '../../core/core.ts';
import type { BackendFactory } from '../../core/framework.ts';
import { PluginIdentityIssuer } from '../../core/oidc/issuer.ts';
import { oidcConfigPaths } from './oidc-config.ts';
import { oidcDiscoveryPaths } from './oidc-discovery.ts';
import { oidcKeyPaths } from './oidc-keys.ts';

/** On a shared store, how often the leader rotates keys that are due (rotation periods are a minute or more). */
const KEY_ROTATION_CHECK_MS = 10_000;

/**
 * The `identity/` backend: the plugin identity token issuer. Its keys live in this mount's barrier view, and
 * the core's `identityTokens` is pointed at the issuer so every mount's system view can ask for tokens.
 */
export const identityBackend = (opts: { defaultIssuer: string }) => (core: Core): BackendFactory => (ctx) => {
  const issuer = new PluginIdentityIssuer({ storage: ctx.storage.sub('oidc/'), clock: ctx.clock, defaultIssuer: opts.defaultIssuer, system: ctx.system });
  core.identityTokens = issuer;
  return {
    // Discovery first: its fixed paths must win over the key and config patterns.
    paths: [...oidcDiscoveryPaths(issuer), ...oidcConfigPaths(issuer), ...oidcKeyPaths(issuer, core)],
    // Keys rotate when used or published on the leader; with other nodes serving too, the leader also looks on its own.
    periodic: ctx.system.shared ? { intervalMs: KEY_ROTATION_CHECK_MS, run: () => issuer.rotateDue() } : undefined,
    // The published documents are cached until the keys next change: a change on another node drops them here too.
    cached: { prefixes: ['oidc/'], invalidate: () => issuer.invalidate() },
  };
};
