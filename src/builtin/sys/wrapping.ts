import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type BackendRequest, type PathDefinition } from '../../core/framework.ts';
import { wrappedEnvelope } from '../../core/wrapping.ts';

/**
 * Vault's sys/wrapping endpoints (docs/wrapping.md). The wrapping token is taken from the body (`token`) or, without
 * one, is the token the request was made with, as Vault's clients send it either way.
 */
export function wrappingPaths(core: Core): PathDefinition[] {
  const tokenFields = { token: field.string('The wrapping token; without it, the token the request is made with.', { secret: true }) };
  const wrappingToken = (req: BackendRequest<typeof tokenFields>, presented: string | undefined): string => {
    const token = req.data.token || presented;
    if (!token) throw new BadRequestError('missing required field "token": the wrapping token must be given in the body or as the request\'s token');
    return token;
  };
  return [
    definePath({
      pattern: 'wrapping/wrap',
      description: 'Wraps the request body in a response-wrapping token (the X-Vault-Wrap-TTL header is required).',
      freeForm: true,
      requiresWrapping: true,
      operations: { update: async (req) => ({ data: { ...req.data } }) },
    }),
    definePath({
      pattern: 'wrapping/unwrap',
      description: 'Returns the answer a wrapping token holds, once, and revokes the token.',
      fields: tokenFields,
      rawResponse: ['application/json'],
      operations: { update: async (req) => ({ raw: { status: 200, body: await core.wrapping.unwrap(wrappingToken(req, req.caller?.clientToken)) } }) },
    }),
    definePath({
      pattern: 'wrapping/lookup',
      description: 'Looks up a wrapping token\'s creation path, time and TTL, without spending it.',
      fields: tokenFields,
      // Anyone holding a wrapping token may check it before unwrapping (Vault's lookup is unauthenticated too).
      unauthenticated: true,
      operations: {
        update: async (req) => ({ data: await core.wrapping.lookup(wrappingToken(req, req.caller?.clientToken)) }),
        read: async (req) => ({ data: await core.wrapping.lookup(wrappingToken(req, req.caller?.clientToken)) }),
      },
    }),
    definePath({
      pattern: 'wrapping/rewrap',
      description: 'Moves a wrapped answer behind a new wrapping token with the same TTL; the old token stops working.',
      fields: tokenFields,
      rawResponse: ['application/json'],
      operations: {
        update: async (req) => {
          const wrapInfo = await core.wrapping.rewrap(wrappingToken(req, req.caller?.clientToken));
          return { raw: { status: 200, body: JSON.stringify(wrappedEnvelope(wrapInfo)) } };
        },
      },
    }),
  ];
}
