// Executes a parse tree with Go's text/template evaluation rules (see values.ts for how JS values map
// onto Go's). Errors carry Go's "template: NAME:LINE:COL: executing "NAME" at <NODE>: ..." shape.

import { arityOf, builtins, type FuncMap, type TemplateFunc } from './builtins.ts';
import { ArgumentLimitError, positionOf, TemplateBudgetError, TemplateExecError, type BudgetLimit } from './errors.ts';
import { sprint } from './fmt.ts';
import type { TemplateLimits } from './limits.ts';
import { commandString, operandString, type Command, type ControlNode, type Node, type Operand, type Pipe } from './nodes.ts';
import { hasMember, kindOf, sortedEntries, truth, typeName } from './values.ts';

export interface ActionContext {
  /** Source of the action, e.g. `.Username | truncate 20`: names the value without revealing it. */
  action: string;
  /** Output already written on the current line, i.e. where the printed text will land. */
  lineBefore: string;
}

export interface ExecuteOptions {
  /**
   * Sees the text of every `{{pipeline}}` that prints, before it joins the output, and returns what
   * to write instead (or throws to abort the execution with that error, unchanged). Literal template
   * text never passes through it. This is how a caller confines data to its place in the output.
   */
  filterAction?: (printed: string, context: ActionContext) => string;
}

/** Thrown through the walk to unwind {{break}} and {{continue}} to their {{range}}. */
class LoopControl {
  kind: 'break' | 'continue';
  constructor(kind: 'break' | 'continue') {
    this.kind = kind;
  }
}

interface Variable {
  name: string;
  value: unknown;
}

export function execute(root: Node[], text: string, name: string, funcs: FuncMap, data: unknown, options: ExecuteOptions, limits: TemplateLimits): string {
  const state = new State(text, name, funcs, options, limits, data ?? undefined);
  state.walkList(data ?? undefined, root);
  return state.out;
}

class State {
  out = '';
  /** The output after its last line break: what a filter is shown, kept so the output is never rescanned. */
  private line = '';
  private steps = 0;
  private vars: Variable[];
  private readonly text: string;
  private readonly name: string;
  private readonly funcs: FuncMap;
  private readonly options: ExecuteOptions;
  private readonly limits: TemplateLimits;

  constructor(text: string, name: string, funcs: FuncMap, options: ExecuteOptions, limits: TemplateLimits, data: unknown) {
    this.text = text;
    this.name = name;
    this.funcs = funcs;
    this.options = options;
    this.limits = limits;
    this.vars = [{ name: '$', value: data }];
  }

  private fail(node: { pos: number }, shown: string, message: string, cause?: unknown): never {
    const { line, col } = positionOf(this.text, node.pos);
    throw new TemplateExecError(`template: ${this.name}:${line}:${col}: executing "${this.name}" at <${shown}>: ${message}`, cause === undefined ? undefined : { cause });
  }

  private overBudget(at: { pos: number }, limit: BudgetLimit, max: number, reason: string): never {
    throw new TemplateBudgetError(this.name, positionOf(this.text, at.pos), limit, max, reason);
  }

  /** Charges `steps` units of work (see limits.ts) to the execution. */
  private spend(at: { pos: number }, steps: number): void {
    this.steps += steps;
    if (this.steps > this.limits.maxSteps) this.overBudget(at, 'maxSteps', this.limits.maxSteps, `evaluation exceeded the limit of ${this.limits.maxSteps} steps`);
  }

  private write(at: { pos: number }, s: string): void {
    const max = this.limits.maxOutputLength;
    if (this.out.length + s.length > max) this.overBudget(at, 'maxOutputLength', max, `output exceeded the limit of ${max} characters`);
    this.out += s;
    const lineBreak = s.lastIndexOf('\n');
    this.line = lineBreak < 0 ? this.line + s : s.slice(lineBreak + 1);
  }

  private failAt(node: Operand, message: string, cause?: unknown): never {
    this.fail(node, operandString(node), message, cause);
  }

  // --- statements ----------------------------------------------------------------------------

  walkList(dot: unknown, list: Node[]): void {
    for (const node of list) this.walk(dot, node);
  }

  private walk(dot: unknown, node: Node): void {
    this.spend(node, 1);
    switch (node.kind) {
      case 'text':
        this.write(node, node.text);
        return;
      case 'action': {
        // Variables declared by an action live until the enclosing {{end}}; declarations print nothing.
        const value = this.evalPipeline(dot, node.pipe);
        if (node.pipe.decl.length === 0) this.print(node.pipe, value);
        return;
      }
      case 'if':
      case 'with': {
        const mark = this.vars.length;
        const value = this.evalPipeline(dot, node.pipe);
        if (truth(value)) this.walkList(node.kind === 'with' ? value : dot, node.list);
        else if (node.elseList) this.walkList(dot, node.elseList);
        this.vars.length = mark;
        return;
      }
      case 'range':
        this.walkRange(dot, node);
        return;
      case 'break':
      case 'continue':
        throw new LoopControl(node.kind);
    }
  }

  private walkRange(dot: unknown, node: ControlNode): void {
    const outer = this.vars.length;
    const value = this.evalPipeline(dot, node.pipe);
    const mark = this.vars.length;
    const decl = node.pipe.decl;
    const iterate = (key: unknown, elem: unknown): boolean => {
      if (decl.length > 0) {
        // With two variables the key comes first, with one the element.
        if (node.pipe.isAssign) {
          this.setVar(node.pipe, decl[0], decl.length > 1 ? key : elem);
          if (decl.length > 1) this.setVar(node.pipe, decl[1], elem);
        } else {
          this.vars[mark - 1].value = elem;
          if (decl.length > 1) this.vars[mark - 2].value = key;
        }
      }
      this.spend(node, 1);
      try {
        this.walkList(elem, node.list);
      } catch (e) {
        if (!(e instanceof LoopControl)) throw e;
        if (e.kind === 'break') return false;
      } finally {
        this.vars.length = mark;
      }
      return true;
    };

    let ran = false;
    switch (kindOf(value)) {
      case 'array':
        for (const [i, elem] of (value as unknown[]).entries()) {
          ran = true;
          if (!iterate(i, elem)) break;
        }
        break;
      case 'map':
        for (const [k, v] of sortedEntries(value as Map<unknown, unknown>)) {
          ran = true;
          if (!iterate(k, v)) break;
        }
        break;
      case 'int': {
        if (decl.length > 1) this.fail(node, `range ${operandString(node.pipe)}`, `can't use a value of type ${typeName(value)} to iterate over more than one variable`);
        for (let i = 0; i < Number(value); i++) {
          ran = true;
          if (!iterate(i, i)) break;
        }
        break;
      }
      case 'invalid':
      case 'nil':
        break; // Go: a nil collection is empty, not an error.
      default:
        this.fail(node, `range ${operandString(node.pipe)}`, `range can't iterate over a value of type ${typeName(value)}`);
    }
    if (!ran && node.elseList) this.walkList(dot, node.elseList);
    this.vars.length = outer;
  }

  private print(pipe: Pipe, value: unknown): void {
    if (typeof value === 'function') this.failAt(pipe, `can't print ${operandString(pipe)} of type func`);
    const printed = value === undefined || value === null ? '<no value>' : sprint([value]);
    this.spend(pipe, printed.length);
    const filter = this.options.filterAction;
    if (!filter) {
      this.write(pipe, printed);
      return;
    }
    // The filter reads the whole line so far, so a long line printed into many times costs each time.
    this.spend(pipe, this.line.length);
    this.write(pipe, filter(printed, { action: operandString(pipe), lineBefore: this.line }));
  }

  // --- variables -----------------------------------------------------------------------------

  /** The innermost variable of that name; the search is charged, as a template can declare thousands. */
  private lookup(node: Operand, name: string): Variable {
    for (let i = this.vars.length - 1; i >= 0; i--) {
      if (this.vars[i].name === name) {
        this.spend(node, this.vars.length - i);
        return this.vars[i];
      }
    }
    this.failAt(node, `undefined variable: ${name}`);
  }

  private setVar(node: Operand, name: string, value: unknown): void {
    this.lookup(node, name).value = value;
  }

  private varValue(node: Operand, name: string): unknown {
    return this.lookup(node, name).value;
  }

  // --- expressions ---------------------------------------------------------------------------

  private evalPipeline(dot: unknown, pipe: Pipe): unknown {
    let value: unknown = MISSING;
    for (const cmd of pipe.cmds) value = this.evalCommand(dot, cmd, value);
    for (const name of pipe.decl) {
      if (pipe.isAssign) this.setVar(pipe, name, value);
      else this.vars.push({ name, value });
    }
    return value;
  }

  /** `final` is the previous pipeline stage's value, passed as the last argument. */
  private evalCommand(dot: unknown, cmd: Command, final: unknown): unknown {
    this.spend(cmd, 1);
    const first = cmd.args[0];
    switch (first.kind) {
      case 'field':
        return this.evalFieldChain(dot, dot, first, first.idents, cmd.args, final);
      case 'chain': {
        if (first.node.kind === 'nil') this.failAt(first, `indirection through explicit nil in ${operandString(first)}`);
        const receiver = this.evalArg(dot, first.node);
        return this.evalFieldChain(dot, receiver, first, first.fields, cmd.args, final);
      }
      case 'identifier':
        return this.evalFunction(dot, first, cmd.args, final);
      case 'variable': {
        const value = this.varValue(first, first.idents[0]);
        if (first.idents.length === 1) {
          this.notAFunction(first, cmd.args, final);
          return value;
        }
        return this.evalFieldChain(dot, value, first, first.idents.slice(1), cmd.args, final);
      }
      case 'pipe':
        this.notAFunction(first, cmd.args, final);
        return this.evalPipeline(dot, first);
    }
    this.notAFunction(first, cmd.args, final);
    switch (first.kind) {
      case 'bool':
        return first.value;
      case 'dot':
        return dot;
      case 'nil':
        this.failAt(first, 'nil is not a command');
      case 'number':
        return first.isFloat && !first.isInt ? first.float : first.int;
      case 'string':
        return first.value;
    }
  }

  private notAFunction(node: Operand, args: Operand[], final: unknown): void {
    if (args.length > 1 || final !== MISSING) this.failAt(node, `can't give argument to non-function ${commandString({ pos: 0, args: [args[0]] })}`);
  }

  private evalArg(dot: unknown, node: Operand): unknown {
    this.spend(node, 1);
    switch (node.kind) {
      case 'dot':
        return dot;
      case 'nil':
        return null;
      case 'field':
        return this.evalFieldChain(dot, dot, node, node.idents, [node], MISSING);
      case 'variable': {
        const value = this.varValue(node, node.idents[0]);
        return node.idents.length === 1 ? value : this.evalFieldChain(dot, value, node, node.idents.slice(1), [node], MISSING);
      }
      case 'pipe':
        return this.evalPipeline(dot, node);
      case 'identifier':
        return this.evalFunction(dot, node, [node], MISSING);
      case 'chain':
        return this.evalCommand(dot, { pos: node.pos, args: [node] }, MISSING);
      case 'bool':
        return node.value;
      case 'number':
        return node.isFloat && !node.isInt ? node.float : node.int;
      case 'string':
        return node.value;
    }
  }

  private evalFieldChain(dot: unknown, receiver: unknown, node: Operand, idents: string[], args: Operand[], final: unknown): unknown {
    let value = receiver;
    for (const ident of idents.slice(0, -1)) value = this.evalField(dot, ident, node, [node], MISSING, value);
    return this.evalField(dot, idents[idents.length - 1], node, args, final, value);
  }

  private evalField(dot: unknown, field: string, node: Operand, args: Operand[], final: unknown, receiver: unknown): unknown {
    this.spend(node, 1);
    const hasArgs = args.length > 1 || final !== MISSING;
    switch (kindOf(receiver)) {
      case 'invalid':
        return undefined; // Go: a field of "no value" (e.g. a missing map key) is no value too.
      case 'nil':
        this.failAt(node, `nil pointer evaluating interface {}.${field}`);
      case 'map': {
        if (hasArgs) this.failAt(node, `${field} is not a method but has arguments`);
        return (receiver as Map<unknown, unknown>).get(field);
      }
      case 'struct': {
        const obj = receiver as Record<string, unknown>;
        if (!hasMember(obj, field)) break;
        const member = obj[field];
        // Inherited functions are methods and get called; an own function-valued property is a
        // func field, returned as a value (Go needs `call` for those).
        if (typeof member === 'function' && !Object.hasOwn(obj, field)) return this.evalCall(dot, member.bind(obj) as TemplateFunc, field, node, args, final);
        if (hasArgs) this.failAt(node, `${field} has arguments but cannot be invoked as function`);
        return member;
      }
    }
    this.failAt(node, `can't evaluate field ${field} in type ${typeName(receiver)}`);
  }

  private evalFunction(dot: unknown, node: Extract<Operand, { kind: 'identifier' }>, args: Operand[], final: unknown): unknown {
    const fn = this.funcs[node.name];
    if (!fn) this.failAt(node, `"${node.name}" is not a defined function`);
    return this.evalCall(dot, fn, node.name, node, args, final);
  }

  /** args[0] names the function; args[1..] are its arguments, then `final` if present. */
  private evalCall(dot: unknown, fn: TemplateFunc, name: string, node: Operand, args: Operand[], final: unknown): unknown {
    const argNodes = args.slice(1);
    const count = argNodes.length + (final === MISSING ? 0 : 1);
    const arity = arityOf(fn);
    if (arity && (count < arity.min || count > arity.max)) {
      const want = arity.min === arity.max ? `${arity.min}` : `at least ${arity.min}`;
      this.failAt(node, `wrong number of args for ${name}: want ${want} got ${count}`);
    }
    // Go's own and/or stop at the first decisive argument; an overriding FuncMap entry does not.
    if ((name === 'and' || name === 'or') && fn === builtins[name]) {
      const stopOn = name === 'or';
      let value: unknown;
      for (const arg of argNodes) {
        value = this.evalArg(dot, arg);
        if (truth(value) === stopOn) return value;
      }
      return final === MISSING ? value : final;
    }
    const values = argNodes.map((arg) => this.evalArg(dot, arg));
    if (final !== MISSING) values.push(final);
    // Every built-in does work linear in the text it is given and returns, so charging both bounds it.
    this.spend(node, values.reduce((sum: number, v) => sum + textLength(v), 0));
    let result: unknown;
    try {
      // Go passes the zero value (nil) where a template has "no value".
      result = fn(...values.map((v) => (v === undefined ? null : v)));
    } catch (e) {
      if (e instanceof ArgumentLimitError) this.overBudget(node, 'argument', e.max, `${name}: ${e.message}`);
      this.failAt(node, `error calling ${name}: ${e instanceof Error ? e.message : String(e)}`, e);
    }
    this.spend(node, textLength(result));
    return result;
  }
}

function textLength(v: unknown): number {
  return typeof v === 'string' || Buffer.isBuffer(v) ? v.length : 0;
}

/** The absent previous-stage value of a pipeline's first command (distinct from every data value). */
const MISSING: unknown = Symbol('missing');
