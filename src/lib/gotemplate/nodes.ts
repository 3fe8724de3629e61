// Parse tree of a Go text/template, shaped like Go's text/template/parse nodes so that exec can follow
// Go's evaluation rules one node kind at a time.

export interface Pipe {
  kind: 'pipe';
  pos: number;
  isAssign: boolean;
  decl: string[];
  cmds: Command[];
}

export interface Command {
  pos: number;
  args: Operand[];
}

export interface NumberValue {
  isInt: boolean;
  isFloat: boolean;
  int: number;
  float: number;
}

export type Operand =
  | { kind: 'field'; pos: number; idents: string[] }
  | { kind: 'variable'; pos: number; idents: string[] }
  | { kind: 'chain'; pos: number; node: Operand; fields: string[] }
  | { kind: 'identifier'; pos: number; name: string }
  | { kind: 'dot'; pos: number }
  | { kind: 'nil'; pos: number }
  | { kind: 'bool'; pos: number; value: boolean }
  | ({ kind: 'number'; pos: number; text: string } & NumberValue)
  | { kind: 'string'; pos: number; quoted: string; value: string }
  | Pipe;

export type Node =
  | { kind: 'text'; pos: number; text: string }
  | { kind: 'action'; pos: number; pipe: Pipe }
  | ControlNode
  | { kind: 'break' | 'continue'; pos: number };

export interface ControlNode {
  kind: 'if' | 'with' | 'range';
  pos: number;
  pipe: Pipe;
  list: Node[];
  elseList: Node[] | null;
}

/** Go's String() of a node: how exec errors show where they happened (`at <.Foo>`). */
export function operandString(n: Operand): string {
  switch (n.kind) {
    case 'field':
      return n.idents.map((i) => `.${i}`).join('');
    case 'variable':
      return [n.idents[0], ...n.idents.slice(1).map((i) => `.${i}`)].join('');
    case 'chain': {
      const inner = n.node.kind === 'pipe' ? `(${operandString(n.node)})` : operandString(n.node);
      return inner + n.fields.map((f) => `.${f}`).join('');
    }
    case 'identifier':
      return n.name;
    case 'dot':
      return '.';
    case 'nil':
      return 'nil';
    case 'bool':
      return String(n.value);
    case 'number':
      return n.text;
    case 'string':
      return n.quoted;
    case 'pipe': {
      const decl = n.decl.length > 0 ? `${n.decl.join(', ')} ${n.isAssign ? '=' : ':='} ` : '';
      return decl + n.cmds.map(commandString).join(' | ');
    }
  }
}

export function commandString(c: Command): string {
  return c.args.map((a) => (a.kind === 'pipe' ? `(${operandString(a)})` : operandString(a))).join(' ');
}
