import { describe, expect, it } from 'vitest';
import { field } from '../../src/core/fields.ts';
import { definePath } from '../../src/core/framework.ts';
import { openApiDocument, templates } from '../../src/core/openapi.ts';

const texts = (pattern: string) => {
  const t = templates(pattern);
  return 'reason' in t ? t.reason : t.variants.map((v) => v.text);
};

describe('path patterns as OpenAPI templates', () => {
  it.each<[string, string[]]>([
    ['config', ['config']],
    ['static-role/(?<name>\\w(?:[\\w\\-./]*\\w)?)', ['static-role/{name}']],
    // Optional parts and alternatives are expanded; a group that may be empty is also the template without it.
    ['roles/?', ['roles/', 'roles']],
    ['(?:leases/)?revoke(?:/(?<url_lease_id>.+))?', ['leases/revoke/{url_lease_id}', 'leases/revoke', 'revoke/{url_lease_id}', 'revoke']],
    ['static-role/?(?<prefix>(?:.+/)?)', ['static-role/{prefix}', 'static-role/', 'static-role']],
    ['leases/lookup/(?<prefix>.*)', ['leases/lookup/{prefix}', 'leases/lookup/']],
    ['mounts/(?<path>.+)/tune', ['mounts/{path}/tune']],
    ['oidc/plugins/\\.well-known/keys', ['oidc/plugins/.well-known/keys']],
    ['a|b/(?<x>[^/]+)', ['a', 'b/{x}']],
  ])('%s -> %j', (pattern, expected) => {
    expect(texts(pattern)).toEqual(expected);
  });

  it.each([
    ['creds/\\w+', 'a class ("\\w") outside a named group'],
    ['creds/.+', '"." outside a named group'],
    ['role[0-9]', '"[" outside a named group'],
    ['(?:ab)+', 'repetition ("+") outside a named group'],
    ['role(?<name>\\w+)', 'a parameter shares a path segment with literal text'],
    ['(?=x)x', 'a lookaround or unnamed special group'],
  ])('%s cannot be a template: %s', (pattern, reason) => {
    expect(texts(pattern)).toBe(reason);
  });
});

describe('the document of a backend', () => {
  const doc = openApiDocument([{
    path: 'kv/',
    paths: [
      definePath({
        pattern: 'item/(?<name>\\w+)',
        description: 'An item.',
        fields: {
          name: field.string('The item\'s name.'),
          size: field.int('Its size.', { required: true, default: 3 }),
          mode: field.string('Its mode.', { oneOf: ['a', 'b'] }),
          ttl: field.duration('How long it lives.', { default: 60 }),
          token: field.string('A secret.', { secret: true }),
          lease: field.duration('Old name of ttl.', { aliasOf: 'ttl' }),
        },
        existenceCheck: async () => false,
        operations: { read: async () => undefined, update: async () => undefined, delete: async () => undefined },
      }),
      definePath({ pattern: 'item/?', description: 'Items.', operations: { list: async () => undefined } }),
      definePath({ pattern: 'status', description: 'Read-only.', unauthenticated: true, fields: { verbose: field.bool('More.') }, rawResponse: ['application/json'], operations: { read: async () => undefined } }),
      definePath({ pattern: 'creds/.+', description: 'Inexpressible.', operations: { read: async () => undefined } }),
    ],
  }], { version: '1.2.3', genericMountPaths: false }) as any;

  it('"a write\'s fields are its JSON body: kinds as types, required, enums, defaults (durations as strings), secrets write-only, aliases deprecated"', () => {
    const post = doc.paths['/kv/item/{name}'].post;
    expect(post.requestBody.content['application/json'].schema).toEqual({
      type: 'object',
      required: ['size'],
      properties: {
        size: { type: 'integer', description: 'Its size.', default: 3 },
        mode: { type: 'string', description: 'Its mode.', enum: ['a', 'b'] },
        ttl: { type: 'string', format: 'duration', description: 'How long it lives.', default: '60' },
        token: { type: 'string', description: 'A secret.', format: 'password', writeOnly: true },
        lease: { type: 'string', format: 'duration', description: 'Old name of ttl.', deprecated: true },
      },
    });
    expect(post['x-vault-createSupported']).toBe(true);
    // A field named like a path parameter is that parameter, described by the field.
    expect(doc.paths['/kv/item/{name}'].parameters).toEqual([{ name: 'name', in: 'path', required: true, description: 'The item\'s name.', schema: { type: 'string', pattern: '^(?:\\w+)$' } }]);
  });

  it('"LIST is a GET with list=true on the template ending in /; a read-only path takes its fields from the query"', () => {
    expect(doc.paths['/kv/item/'].get.parameters).toEqual([{ name: 'list', in: 'query', required: true, description: expect.any(String), schema: { type: 'string', enum: ['true'] } }]);
    const status = doc.paths['/kv/status'].get;
    expect(status.parameters).toEqual([{ name: 'verbose', in: 'query', required: false, description: 'More.', schema: { type: 'boolean', description: 'More.' } }]);
    expect(status.security).toEqual([]);
    expect(status.responses[200].content).toHaveProperty('application/json');
    expect(doc.paths['/kv/item/{name}'].get.responses[200].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/StandardResponse' });
  });

  it('"what a template cannot say is listed with the reason"', () => {
    expect(doc['x-strongroom-unexpressed']).toEqual([{ path: 'kv/creds/.+', reason: '"." outside a named group' }]);
  });
});
