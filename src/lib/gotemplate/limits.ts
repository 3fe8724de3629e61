// What one template may cost. Rendering is synchronous on the server's event loop, so without these a
// single `{{range 300000000}}` or `random 100000000` would stall every other request.
//
// Steps are the work unit. Each node walked, command or argument evaluated, field looked up, variable
// scope searched and range iteration is a step, and so is each character a function is given or
// returns and each character printed (or shown to the action filter as the line so far): counting
// characters keeps every kind of step under about 120 ns (2-core VM, Node 24), so the budget is a
// bound on time. The slowest hostile template of test/unit/gotemplate-budget.test.ts (timestamp over a
// long layout, in a loop) is refused after about 11 ms, parsing included (median; up to 20 ms before
// the JIT warms up); parsing 16 KiB of text takes up to about 4 ms.
//
// The defaults are far above what real templates need: Vault's default username template takes under
// 100 steps, and a 4 KiB Active Directory creation LDIF joining 20 groups about 2,500 steps and 4.5 KiB
// of output.

export interface TemplateLimits {
  /** Characters of template text; parsing is linear in it. */
  maxSourceLength: number;
  /**
   * Nesting of {{if}}/{{with}}/{{range}} (each {{else if}} is one more level, as Go nests it) and of
   * parenthesised pipelines. Execution recurses exactly as deep ({{define}}/{{template}} are refused),
   * so this also bounds the call depth at run time.
   */
  maxDepth: number;
  maxSteps: number;
  /** Characters of rendered output. */
  maxOutputLength: number;
}

export const DEFAULT_LIMITS: Readonly<TemplateLimits> = Object.freeze({
  maxSourceLength: 16 * 1024,
  maxDepth: 100,
  maxSteps: 100_000,
  maxOutputLength: 32 * 1024,
});

// Caps on function arguments that size an allocation directly, checked before allocating (the step
// budget only sees a result once it exists).

/** `random N`: Vault has no cap; no username or password needs more. */
export const MAX_RANDOM_LENGTH = 1024;
/** printf width and precision (Go's fmt allows up to 1e6, which would be a megabyte per verb). */
export const MAX_FORMAT_WIDTH = 1024;
/** The longest string a function builds whose size is not linear in its inputs (replace, printf). */
export const MAX_BUILT_LENGTH = 1 << 20;
