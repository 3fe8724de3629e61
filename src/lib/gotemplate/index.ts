// Go text/template for Strongroom's username and LDIF templates. See values.ts for how JavaScript
// data maps onto Go values (plain objects are structs, Maps are maps).

import { builtins, type FuncMap } from './builtins.ts';
import { execute, type ExecuteOptions } from './exec.ts';
import { parse } from './parser.ts';

export type { FuncMap, TemplateFunc } from './builtins.ts';
export { withArity } from './builtins.ts';
export { TemplateExecError, TemplateParseError } from './errors.ts';
export type { ActionContext, ExecuteOptions } from './exec.ts';
export { vaultFuncs } from './vault-funcs.ts';

export interface Template {
  /** Throws TemplateExecError; an error thrown by `options.filterAction` propagates unchanged. */
  execute(data: unknown, options?: ExecuteOptions): string;
}

/** Parses Go template text; throws TemplateParseError (functions are resolved now, as in Go). */
export function parseTemplate(text: string, options: { name?: string; funcs?: FuncMap } = {}): Template {
  const name = options.name ?? 'template';
  const funcs: FuncMap = { ...builtins, ...options.funcs };
  const root = parse(text, name, (fn) => Object.hasOwn(funcs, fn));
  return {
    execute: (data, executeOptions = {}) => execute(root, text, name, funcs, data, executeOptions),
  };
}
