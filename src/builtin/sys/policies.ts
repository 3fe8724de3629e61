import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { canonicalPolicyName } from '../../core/policy-store.ts';

/** Policy bodies may arrive base64-encoded (Vault clients do this); decode when it decodes cleanly. */
function policyText(raw: string | undefined): string {
  if (!raw || raw.trim() === '') throw new BadRequestError('missing required field "policy": \'policy\' parameter not supplied or empty');
  if (/^[A-Za-z0-9+/]+={0,2}$/.test(raw.trim()) && raw.trim().length % 4 === 0) {
    const decoded = Buffer.from(raw.trim(), 'base64').toString('utf8');
    if (!decoded.includes('\uFFFD') && /[{"=]/.test(decoded)) return decoded;
  }
  return raw;
}

export function policyPaths(core: Core): PathDefinition[] {
  const store = core.policies;
  return [
    definePath({
      pattern: 'policies/acl/?',
      description: 'List ACL policies.',
      operations: { list: async () => ({ data: { keys: await store.listAcl() } }) },
    }),
    definePath({
      pattern: 'policies/acl/(?<name>.+)',
      canonical: { name: canonicalPolicyName },
      description: 'Read, write or delete an ACL policy (HCL or JSON).',
      fields: { policy: field.string('The policy document, HCL or JSON (optionally base64).') },
      operations: {
        read: async (req) => {
          const p = await store.readAcl(req.params.name);
          return p ? { data: p } : undefined;
        },
        update: async (req) => store.writeAcl(req.params.name, policyText(req.data.policy)),
        delete: async (req) => store.deleteAcl(req.params.name),
      },
    }),
    definePath({
      pattern: 'policy/?',
      description: 'List ACL policies (legacy path).',
      operations: {
        read: async () => {
          const keys = await store.listAcl();
          return { data: { keys, policies: keys } };
        },
      },
    }),
    definePath({
      pattern: 'policy/(?<name>.+)',
      canonical: { name: canonicalPolicyName },
      description: 'Read, write or delete an ACL policy (legacy path: `rules` instead of `policy`).',
      fields: { policy: field.string('The policy document.'), rules: field.string('Deprecated alias of policy.', { aliasOf: 'policy' }) },
      operations: {
        read: async (req) => {
          const p = await store.readAcl(req.params.name);
          return p ? { data: { name: p.name, rules: p.policy } } : undefined;
        },
        update: async (req) => {
          await store.writeAcl(req.params.name, policyText(req.data.policy));
          if (req.sentAs('policy') === 'rules') return { warnings: ["'rules' is deprecated, please use 'policy' instead"] };
        },
        delete: async (req) => store.deleteAcl(req.params.name),
      },
    }),
    definePath({
      pattern: 'policies/password/(?<name>[^/]+)/generate',
      canonical: { name: canonicalPolicyName },
      description: 'Generate a password from a password policy.',
      operations: { read: async (req) => ({ data: { password: await store.generateOrNotFound(req.params.name) } }) },
    }),
    definePath({
      pattern: 'policies/password/?',
      description: 'List password policies.',
      operations: { list: async () => ({ data: { keys: await store.listPassword() } }) },
    }),
    definePath({
      pattern: 'policies/password/(?<name>[^/]+)',
      canonical: { name: canonicalPolicyName },
      description: 'Read, write or delete a password policy.',
      fields: { policy: field.string('HCL: length and rule "charset" blocks.') },
      operations: {
        read: async (req) => {
          const text = await store.readPassword(req.params.name);
          return text === undefined ? undefined : { data: { policy: text } };
        },
        update: async (req) => store.writePassword(req.params.name, policyText(req.data.policy)),
        delete: async (req) => store.deletePassword(req.params.name),
      },
    }),
  ];
}
