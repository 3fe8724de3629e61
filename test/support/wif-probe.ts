// A minimal engine/auth method that returns its mount's plugin identity token through the system view, so
// tests exercise the real path a cloud mount takes (mount accessor, class, identity_token_key tune option).
import { field } from '../../src/core/fields.ts';
import { definePath, type BackendFactory } from '../../src/core/framework.ts';

export const wifProbe: BackendFactory = (ctx) => ({
  paths: [definePath({
    pattern: 'token',
    description: 'Plugin identity token of this mount (test probe).',
    fields: { audience: field.string('Audience.'), ttl: field.duration('TTL.') },
    operations: { update: async (req) => ({ data: await ctx.system.generateIdentityToken(req.data.audience ?? '', req.data.ttl ?? 0) }) },
  })],
});

/** Registers the probe as both a secrets engine and an auth method type named "wif". */
export const wifBackends = { secret: { wif: wifProbe }, auth: { wif: wifProbe } };
