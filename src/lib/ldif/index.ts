export type { LdifAttribute, LdifModification, LdifRecord } from './types.ts';
export { LdifParseError, parseLdif } from './parse.ts';
export { ldifActionGuard, LdifInjectionError, renderLdif } from './template-guard.ts';
