// Go text/template for Strongroom's username and LDIF templates. See values.ts for how JavaScript
// data maps onto Go values (plain objects are structs, Maps are maps), and limits.ts for what one
// template may cost.

import { builtins, type FuncMap } from './builtins.ts';
import { execute, type ExecuteOptions } from './exec.ts';
import { DEFAULT_LIMITS, type TemplateLimits } from './limits.ts';
import { parse } from './parser.ts';

export type { FuncMap, TemplateFunc } from './builtins.ts';
export { withArity } from './builtins.ts';
export { TemplateBudgetError, TemplateExecError, TemplateParseError, type BudgetLimit } from './errors.ts';
export type { ActionContext, ExecuteOptions } from './exec.ts';
export { DEFAULT_LIMITS, MAX_BUILT_LENGTH, MAX_FORMAT_WIDTH, MAX_RANDOM_LENGTH, type TemplateLimits } from './limits.ts';
export { vaultFuncs } from './vault-funcs.ts';

export interface Template {
  /**
   * Throws TemplateExecError, or TemplateBudgetError past the step or output limit; an error thrown by
   * `options.filterAction` propagates unchanged.
   */
  execute(data: unknown, options?: ExecuteOptions): string;
}

/**
 * Parses Go template text; throws TemplateParseError (functions are resolved now, as in Go), or
 * TemplateBudgetError for text longer or more deeply nested than `limits` allow. Limits not given
 * take their DEFAULT_LIMITS value, for parsing and for every execution.
 */
export function parseTemplate(text: string, options: { name?: string; funcs?: FuncMap; limits?: Partial<TemplateLimits> } = {}): Template {
  const name = options.name ?? 'template';
  const funcs: FuncMap = { ...builtins, ...options.funcs };
  const limits: TemplateLimits = { ...DEFAULT_LIMITS, ...options.limits };
  const root = parse(text, name, (fn) => Object.hasOwn(funcs, fn), limits);
  return {
    execute: (data, executeOptions = {}) => execute(root, text, name, funcs, data, executeOptions, limits),
  };
}
