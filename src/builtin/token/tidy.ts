import type { Core } from '../../core/core.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

/**
 * auth/token/tidy: removes token index entries left without their token (see TokenStore.tidy). Vault runs it in the
 * background and answers 202 with a warning; here it has finished by the time the 202 comes, and its counts go to
 * the log (counts only: no token, salted or not).
 */
export function tidyPaths(core: Core): PathDefinition[] {
  return [
    definePath({
      pattern: 'tidy',
      description: 'Remove accessor, parent and revocation index entries whose token no longer exists.',
      operations: {
        update: async () => {
          const removed = await core.tokens.tidy();
          core.logger.info({ accessor_entries: removed.accessors, parent_entries: removed.parents, revocation_markers: removed.revoking }, 'token tidy removed index entries without a token');
          return { status: 202, data: null };
        },
      },
    }),
  ];
}
