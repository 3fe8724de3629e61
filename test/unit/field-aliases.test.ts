// One name per effect (core/field-aliases.ts): aliases folded before the ACL, and the ACL reading its rules the same way.
import { describe, expect, it } from 'vitest';
import { foldAliases, parameterSpelling, parameterView } from '../../src/core/field-aliases.ts';
import { field, validateFields, type Fields } from '../../src/core/fields.ts';
import { Acl } from '../../src/core/policy/acl.ts';
import { parseAclPolicy } from '../../src/core/policy/parse.ts';
import { BadRequestError } from '../../src/core/errors.ts';

const lower = (v: string) => v.toLowerCase();
const fields: Fields = {
  token_policies: field.commaList('policies', { canonicalItem: (p) => p.trim().toLowerCase() }),
  policies: field.commaList('old name', { canonicalItem: (p) => p.trim().toLowerCase(), aliasOf: 'token_policies' }),
  members: field.commaList('names the handler matches without case', { matchKey: lower }),
  ttl: field.duration('ttl'),
  lease: field.duration('old ttl', { aliasOf: 'ttl' }),
};

/** The pipeline's steps for one request body: decode, fold, and the view and spelling the ACL gets. */
function judged(body: Record<string, unknown>) {
  const input = { ...body };
  const { values } = validateFields(fields, input);
  const folded = foldAliases(fields, input, values);
  return { ...folded, view: parameterView(folded.input, folded.values, fields) };
}

const allows = (policy: string, body: Record<string, unknown>) => {
  const acl = new Acl([parseAclPolicy('p', `path "x" {\n capabilities = ["update"]\n ${policy}\n}`)]);
  const { view } = judged(body);
  return acl.allowOperation('x', 'update', view, { parameters: parameterSpelling(fields) }).allowed;
};

describe('foldAliases', () => {
  it('"an alias alone becomes its field; the name it came under is kept for the handler"', () => {
    const r = judged({ policies: 'A, b', lease: '1h' });
    expect(r.input).toEqual({ token_policies: 'A, b', ttl: '1h' });
    expect(r.values).toMatchObject({ token_policies: ['a', 'b'], ttl: 3600, policies: undefined, lease: undefined });
    expect([...r.sentAs]).toEqual([['token_policies', 'policies'], ['ttl', 'lease']]);
  });

  it('"both names with the same decoded value are one field"', () => {
    const r = judged({ policies: ['B', 'a'], token_policies: 'b,A', ttl: 3600, lease: '1h' });
    expect(r.input).toEqual({ token_policies: 'b,A', ttl: 3600 });
    expect(r.sentAs.size).toBe(0);
  });

  it.each([
    [{ policies: 'a', token_policies: 'b' }, 'policies', 'token_policies'],
    [{ lease: '1h', ttl: '2h' }, 'lease', 'ttl'],
  ])('"both names with different values are a 400 naming both": %j', (body, alias, name) => {
    let error: unknown;
    try {
      judged(body);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(BadRequestError);
    expect((error as Error).message).toContain(`"${alias}"`);
    expect((error as Error).message).toContain(`"${name}"`);
  });
});

describe('the ACL through parameterSpelling', () => {
  it.each([
    ['a deny on the field, the alias sent', 'denied_parameters = { "token_policies" = ["admin"] }', { policies: 'x, ADMIN' }, false],
    ['a deny on the alias, the field sent', 'denied_parameters = { "policies" = ["admin"] }', { token_policies: ['admin'] }, false],
    ['a deny written in another case', 'denied_parameters = { "policies" = ["Admin"] }', { token_policies: 'admin' }, false],
    ['a deny on any value of the alias', 'denied_parameters = { "lease" = [] }', { ttl: 60 }, false],
    ['an allow on the field, the alias sent', 'allowed_parameters = { "token_policies" = ["dev"] }', { policies: 'DEV' }, true],
    ['an allow on the field, another value under the alias', 'allowed_parameters = { "token_policies" = ["dev"] }', { policies: 'ops' }, false],
    ['required on the alias, the field sent', 'required_parameters = ["lease"]', { ttl: 60 }, true],
    ['required on the field, neither sent', 'required_parameters = ["ttl"]', { members: 'x' }, false],
    ['a deny on a caseless member', 'denied_parameters = { "members" = ["svc-admin"] }', { members: 'x,SVC-Admin' }, false],
    ['an allow on a caseless member compares as sent', 'allowed_parameters = { "members" = ["svc-a"] }', { members: 'SVC-A' }, false],
    ['an allow on a caseless member, the same spelling', 'allowed_parameters = { "members" = ["svc-a"] }', { members: ['svc-a'] }, true],
  ])('%s', (_label, policy, body, allowed) => {
    expect(allows(policy, body)).toBe(allowed);
  });
});
