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

/** Thrown by built-ins and value helpers; exec wraps it with the template location. */
export class EvalError extends Error {}
