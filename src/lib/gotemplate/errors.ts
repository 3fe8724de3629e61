/** A template that does not parse; `line`/`col` are 1-based and point at the offending token. */
export class TemplateParseError extends Error {
  line: number;
  col: number;
  reason: string;

  constructor(name: string, line: number, col: number, reason: string) {
    super(`template: ${name}:${line}:${col}: ${reason}`);
    this.name = 'TemplateParseError';
    this.line = line;
    this.col = col;
    this.reason = reason;
  }
}

/** A failure while executing a parsed template (bad field, function error, type mismatch...). */
export class TemplateExecError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = 'TemplateExecError';
  }
}

/** Which cap a template ran into: one of TemplateLimits, or a function's own argument cap. */
export type BudgetLimit = 'maxSourceLength' | 'maxDepth' | 'maxSteps' | 'maxOutputLength' | 'argument';

/**
 * A template that would cost more than its budget, at parse or execution time. Distinct from the other
 * errors so callers can tell "too big" from "wrong"; `reason` names the limit and its value, never data.
 * `line`/`col` point at the template text where the budget ran out.
 */
export class TemplateBudgetError extends Error {
  limit: BudgetLimit;
  max: number;
  line: number;
  col: number;
  reason: string;

  constructor(name: string, at: Position, limit: BudgetLimit, max: number, reason: string) {
    super(`template: ${name}:${at.line}:${at.col}: ${reason}`);
    this.name = 'TemplateBudgetError';
    this.limit = limit;
    this.max = max;
    this.line = at.line;
    this.col = at.col;
    this.reason = reason;
  }
}

/** Thrown by built-ins and value helpers; exec wraps it with the template location. */
export class EvalError extends Error {}

/**
 * Thrown by a function whose arguments would make it allocate or loop past its cap (`random 100000000`);
 * exec turns it into a TemplateBudgetError at the call. `what` names the argument, not its value.
 */
export class ArgumentLimitError extends Error {
  max: number;

  constructor(what: string, max: number) {
    super(`${what} exceeded the limit of ${max}`);
    this.max = max;
  }
}

export interface Position {
  line: number;
  col: number;
}

/** 1-based line and column of an offset in the template text. */
export function positionOf(text: string, pos: number): Position {
  const before = text.slice(0, pos);
  return { line: before.split('\n').length, col: pos - (before.lastIndexOf('\n') + 1) + 1 };
}
