// Seeded hostile values to every field of every write endpoint of every mount, over real HTTP: no answer may be
// a 5xx or take longer than its timeout, and the server must be healthy at the end (docs/limits.md).
//
// The server runs in a child process that this same file hosts (see `host` at the bottom): a handler stuck in a
// synchronous loop would freeze a server in the test's own thread, and with it the timeout meant to catch it, and a
// native assertion would end the test's own process. Here the test stays free, times the request out, checks
// whether the server's event loop still answers a ping, and if not (or if it died) starts another and carries on.
import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { cloudSecretsEngine } from '../../src/engines/cloud/index.ts';
import { backendTypes } from '../../src/engines.ts';
import type { FieldKind } from '../../src/core/fields.ts';
import { createLogger } from '../../src/logger.ts';
import { createServer } from '../../src/server.ts';
import { loadSettings } from '../../src/settings.ts';
import { ADMIN_GRAPH_PERMISSIONS, seedApp, type SeededApp } from '../support/azure-emulator/seed.ts';
import { ENV_NAME, FAST_RETRY, startCloudWorld, type CloudWorld } from '../support/cloud-engine.ts';
import { ouConfig } from '../support/ldap-engine.ts';
import { canBind, createIsolatedOu, type IsolatedOu, type SlapdFacts } from '../support/slapd.ts';

const SEED = 0x5eed_f022;
const REQUEST_TIMEOUT_MS = 8_000;
/** A server whose event loop does not answer within this is frozen, not slow. */
const PING_TIMEOUT_MS = 2_000;
/** Fresh servers the run may start after a freeze or a crash before it gives up. */
const MAX_RESTARTS = 3;
const ROOT = 'root';
const RESOURCE = 'https://management.azure.com/';
/** Every named capture of every pattern gets this, so each path addresses the fixtures below. */
const NAME = 'fuzz';

/**
 * Findings whose cause is in another engineer's files and is being fixed there; the lead empties this list. Each
 * names a hostile write: method, path, field, and the labels of the values (or '*' for any). A KNOWN write is not
 * sent, because some take the whole process down (a native assertion, memory), and the run prints how many it held
 * back; emptying the list sends them again, and then any 5xx, freeze or timer overflow they cause fails the test.
 */
const KNOWN: Array<{ method: string; path: string; field: string; values: string[]; why: string }> = [];

// ---------------------------------------------------------------------------------------------------------------
// Hostile values. Each is raw JSON text, so a body can carry what JSON.stringify cannot write (1e400 parses to
// Infinity, 9223372036854775808 loses precision, -0).

type Kind = 'number' | 'duration' | 'type' | 'string' | 'template' | 'ldif' | 'document';
interface Hostile { kind: Kind; label: string; json: string }

const raw = (kind: Kind, json: string, label = json): Hostile => ({ kind, label, json });
const value = (kind: Kind, v: unknown, label: string): Hostile => ({ kind, label, json: JSON.stringify(v) });
const nested = (depth: number, open: string, close: string, leaf: string) => open.repeat(depth) + leaf + close.repeat(depth);
const KiB = 1024;

// DNs in injection attempts name nothing that exists: the engine's bind account may manage the whole shared tree.
const NOWHERE = 'cn=fuzz-victim,ou=fuzz-nowhere,dc=strongroom,dc=test';

const HOSTILE: Hostile[] = [
  raw('number', '1e308'), raw('number', '-1e308'), raw('number', '1e400'), raw('number', '-1e400'), raw('number', '9223372036854775808', '2^63'),
  raw('number', '99999999999999999999'), raw('number', '9007199254740993', '2^53+1'), raw('number', '-0'), raw('number', '1.5'), raw('number', '-1'),
  raw('number', '1e-400'), raw('number', '9007199254740991', '2^53-1'), raw('number', '4294967296', '2^32'), raw('number', '2147483648', '2^31'), raw('number', '1e15'), value('number', '99999999999999999999', '"99999999999999999999"'), value('number', '0xffffffffffffffffffff', '"0xfff...f" (80 bits)'),
  value('number', 'NaN', '"NaN"'), value('number', '-9223372036854775809', '"-2^63-1"'),

  // The parser's own edge cases ("+5d", "-0", "1.5") are in test/unit/durations.test.ts; these are the ones that size things.
  value('duration', '36500d', '"36500d" (the maximum)'), value('duration', '25d', '"25d" (past 2^31 ms)'), value('duration', '36501d', '"36501d"'),
  value('duration', '99999999999h', '"99999999999h"'), value('duration', '9999999999999999999h', '"9999999999999999999h"'), value('duration', '1e400s', '"1e400s"'),
  value('duration', '-1h', '"-1h"'), value('duration', '1h'.repeat(1000), '"1h" x 1000'), value('duration', `${'9'.repeat(400)}s`, '400 nines + "s"'),

  raw('type', 'true'), raw('type', 'false'), raw('type', 'null'), raw('type', '[]'), raw('type', '{}'), raw('type', '[[["a"]]]'),
  raw('type', nested(50, '{"a":', '}', '1'), 'object 50 deep'), raw('type', nested(50, '[', ']', '1'), 'array 50 deep'),
  raw('type', nested(5000, '[', ']', '"a"'), 'array 5000 deep'), raw('type', nested(5000, '{"a":', '}', '1'), 'object 5000 deep'),
  value('type', Array.from({ length: 5000 }, (_, i) => `e${i}`), '5000-element list'), value('type', Array(200).fill({ a: [1, { b: null }] }), 'list of 200 objects'),
  raw('type', '{"__proto__":{"polluted":true}}', '{"__proto__": ...}'), raw('type', '{"constructor":{"prototype":{"polluted":true}}}', '{"constructor": ...}'),
  value('type', Object.fromEntries(Array.from({ length: 3000 }, (_, i) => [`k${i}`, `v${i}`])), 'object of 3000 keys'),

  value('string', '\u0000', 'NUL'), value('string', 'a\u0000b', 'a NUL b'), value('string', String.fromCharCode(...Array.from({ length: 31 }, (_, i) => i + 1), 127), 'control characters'),
  value('string', 'line\r\nbreak\ttab', 'CR LF TAB'), raw('string', '"\\ud800"', 'lone high surrogate'), raw('string', '"\\udc00x\\ud800"', 'lone surrogates'),
  value('string', 'x'.repeat(100 * KiB), '100 KiB string'), value('string', ','.repeat(100 * KiB), '100 KiB of commas'), value('string', 'é'.repeat(40 * KiB), '40 Ki "é"'),
  value('string', '\u202e\ufeff\u200b', 'RTL override, BOM, zero width'), value('string', '../../../../etc/passwd', 'path traversal'), value('string', '%00%2e%2e%2f', 'percent escapes'),
  value('string', ' ', 'one space'), value('string', '', 'empty string'), value('string', '*', '"*"'), value('string', '=', '"="'), value('string', 'a=b,c=d=e,,=', 'key=value soup'),

  value('template', '{{range 300000000}}{{end}}', '{{range 300000000}}'), value('template', '{{random 100000000}}', '{{random 100000000}}'),
  value('template', '{{printf "%1000000000d" 1}}', 'printf width 1e9'), value('template', '{{range 300000000}}{{range 300000000}}x{{end}}{{end}}', 'nested ranges'),
  value('template', '{{define "a"}}{{template "a"}}{{end}}{{template "a"}}', 'recursive define'), value('template', '{{'.repeat(20_000), '"{{" x 20000'),
  value('template', `${'{{if 1}}'.repeat(2000)}x${'{{end}}'.repeat(2000)}`, 'if nested 2000 deep'), value('template', '{{.Username}}'.repeat(5000), '{{.Username}} x 5000'),
  value('template', '{{replace "" (printf "%1000s" "") (printf "%1000s" "")}}', 'replace square'), value('template', '{{ .Nope.Nope.Nope }}{{ index . 99999999 }}', 'missing fields'),
  value('template', Buffer.from('{{range 300000000}}{{end}}').toString('base64'), 'base64 range bomb'),

  value('ldif', `x\ndn: ${NOWHERE}\nchangetype: delete\n`, 'LDIF: injected delete record'), value('ldif', 'x\r\nchangetype: modify\r\nreplace: userPassword\r\nuserPassword: pwned', 'LDIF: injected CRLF modify'),
  value('ldif', `cn=x\n-\nadd: member\nmember: ${NOWHERE}`, 'LDIF: injected change'), value('ldif', `dn:: ${Buffer.from(NOWHERE).toString('base64')}\nchangetype: delete`, 'LDIF: base64 dn line'),
  value('ldif', '*)(objectClass=*))(|(cn=*', 'LDAP filter injection'), value('ldif', 'cn=a\\,b+c=d,<>;#"\\00', 'DN specials'), value('ldif', ` #lead,${NOWHERE} `, 'DN with lead/trail space'),
  value('ldif', `dn: ${NOWHERE}\nobjectClass: top\n\n`.repeat(1500), '1500 LDIF records'),

  value('document', 'length = 9007199254740991\nrule "charset" { charset = "a" }', 'password policy length 2^53-1'),
  value('document', 'length = 1e308\nrule "charset" { charset = "a" min-chars = 99999999999 }', 'password policy 1e308'),
  value('document', `rule "charset" { charset = "${'ab'.repeat(30 * KiB)}" }`, 'password policy 60 KiB charset'),
  value('document', `path "${'a/'.repeat(30 * KiB)}" { capabilities = ["read"] }`, 'policy with a 60 KiB path'),
  value('document', '['.repeat(60 * KiB), '"[" x 61440'), value('document', `${'path "a" {'.repeat(3000)}${'}'.repeat(3000)}`, 'HCL blocks 3000 deep'),
  value('document', JSON.stringify(Array(1500).fill({ role_name: 'Reader', scope: '/' })), 'JSON list of 1500 role assignments'),
  value('document', '[{"role_name":{"a":1},"scope":[1]}]', 'JSON role with wrong types'), value('document', '[{"__proto__":{"role_name":"Reader"}}]', 'JSON "__proto__" role'),
  value('document', `{"path":{"a":${nested(3000, '{"a":', '}', '1')}}}`, 'JSON policy 3000 deep'),
];

/** Keys no endpoint declares, sent beside the declared ones. */
const UNKNOWN_KEYS = ['__proto__', 'constructor', 'toString', 'hasOwnProperty', '', '\u0000', 'a.b', 'k'.repeat(5000), 'list', 'help'];

// ---------------------------------------------------------------------------------------------------------------
// Seeded choice.

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

class Choice {
  readonly #next: () => number;
  constructor(seed: number) {
    this.#next = mulberry32(seed);
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.#next() * items.length)];
  }
  /**
   * The values one field of a write meets: every value of the kind that can pass its own checks and then size a
   * loop, an allocation or a timer (each number for an integer, each duration for a duration), some more of the
   * kinds most likely to reach it, and one of every other kind.
   */
  values(field: FieldInfo): Hostile[] {
    const { every, more, count } = FOCUS[field.kind] ?? { every: [], more: STRINGLY, count: 3 };
    const others = [...new Set(HOSTILE.map((h) => h.kind))].filter((k) => !every.includes(k));
    return [
      ...HOSTILE.filter((h) => every.includes(h.kind)),
      ...Array.from({ length: count }, () => this.pick(HOSTILE.filter((h) => more.includes(h.kind)))),
      ...others.map((k) => this.pick(HOSTILE.filter((h) => h.kind === k))),
    ];
  }
}

const FOCUS: Partial<Record<FieldKind, { every: Kind[]; more: Kind[]; count: number }>> = {
  int: { every: ['number'], more: [], count: 0 },
  duration: { every: ['duration'], more: ['number'], count: 4 },
};
const STRINGLY: Kind[] = ['string', 'template', 'ldif', 'document'];

// ---------------------------------------------------------------------------------------------------------------
// The path tables as the server reports them, and their concrete requests.

interface FieldInfo { name: string; kind: FieldKind }
interface PathInfo { mount: string; pattern: string; fields: FieldInfo[]; operations: string[] }

/**
 * A concrete path for a pattern: each named capture becomes NAME, optional groups are kept (so `(?:leases/)?renew`
 * gives `leases/renew`), escapes are unescaped. A construct this does not know throws, and the caller checks the
 * result against the pattern, so a new path shape cannot be skipped unnoticed.
 */
function instantiate(pattern: string): string {
  let out = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === '\\') out += pattern[++i];
    else if (c === '(') {
      const end = closingParen(pattern, i);
      const inner = pattern.slice(i, end + 1);
      if (inner.startsWith('(?<')) out += inner.startsWith('(?<prefix>') ? `${NAME}/` : NAME;
      else if (inner.startsWith('(?:')) out += instantiate(inner.slice(3, -1));
      else throw new Error(`pattern ${pattern}: unsupported group ${inner}`);
      i = end;
      if (pattern[i + 1] === '?') i++;
    } else if (c === '?') continue; // the optional character before it is kept
    else if ('[]|*+{}.^$'.includes(c)) throw new Error(`pattern ${pattern}: unsupported "${c}" outside a named group`);
    else out += c;
  }
  return out;
}

function closingParen(s: string, open: number): number {
  let depth = 0;
  let inClass = false;
  for (let i = open; i < s.length; i++) {
    const c = s[i];
    if (c === '\\') i++;
    else if (inClass) inClass = c !== ']';
    else if (c === '[') inClass = true;
    else if (c === '(') depth++;
    else if (c === ')' && --depth === 0) return i;
  }
  throw new Error(`unbalanced group in ${s}`);
}

interface Group {
  method: 'POST' | 'PATCH' | 'DELETE';
  /** The operation the group aims at; POST reaches create when the object is absent (deleted before each request). */
  operation: 'create' | 'update' | 'patch' | 'delete';
  mount: string;
  path: string;
  fields: FieldInfo[];
  readable: boolean;
}

function groupsOf(p: PathInfo): Group[] {
  if (!p.operations.some((op) => ['create', 'update', 'patch', 'delete'].includes(op))) return [];
  const path = p.mount + instantiate(p.pattern);
  expect(new RegExp(`^${p.pattern}$`).test(path.slice(p.mount.length)), `${p.mount}${p.pattern} instantiated as ${path}`).toBe(true);
  const has = (op: string) => p.operations.includes(op);
  const base = { mount: p.mount, path, fields: p.fields, readable: has('read') };
  const groups: Group[] = [];
  if (has('update') || has('create')) groups.push({ ...base, method: 'POST', operation: has('update') ? 'update' : 'create' });
  if (has('update') && has('create')) groups.push({ ...base, method: 'POST', operation: 'create' });
  if (has('patch')) groups.push({ ...base, method: 'PATCH', operation: 'patch' });
  if (has('delete')) groups.push({ ...base, method: 'DELETE', operation: 'delete' });
  return groups;
}

// ---------------------------------------------------------------------------------------------------------------
// One server generation: a process with a fresh server, its own OU and its own cloud admin application.

interface Answer { status: number | 'timeout' | 'no answer'; text: string; ms: number }
interface LoggedError { msg?: string; err?: { message?: string; stack?: string } }

class Generation {
  readonly logs: LoggedError[] = [];
  crash: string | undefined;
  readonly child: ChildProcess;
  readonly url: string;
  readonly paths: PathInfo[];
  readonly ou: IsolatedOu;
  readonly admin: SeededApp;
  readonly #stderr: () => string;
  #pings = new Map<number, () => void>();
  #ping = 0;

  constructor(child: ChildProcess, stderr: () => string, ready: { url: string; paths: PathInfo[] }, ou: IsolatedOu, admin: SeededApp) {
    this.child = child;
    this.#stderr = stderr;
    this.url = ready.url;
    this.paths = ready.paths;
    this.ou = ou;
    this.admin = admin;
    child.on('message', (m: HostMessage) => {
      if (m.type === 'log') this.logs.push(JSON.parse(m.line) as LoggedError);
      if (m.type === 'pong') this.#pings.get(m.id)?.();
    });
    child.on('exit', (code, signal) => void (this.crash ??= `the server process exited (code ${code}, signal ${signal}): ${this.#stderr()}`));
  }

  static async start(facts: SlapdFacts, cloud: CloudWorld, admin: SeededApp): Promise<Generation> {
    const ou = await createIsolatedOu(facts, { users: 2, serviceAccounts: 3 });
    const child = fork(fileURLToPath(import.meta.url), {
      env: { ...process.env, [HOST]: JSON.stringify({ envFile: cloud.envFile, unsealKey: UNSEAL_KEY } satisfies HostInit) },
      execArgv: ['--no-warnings'], stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    // What a dying process prints (a native assertion, an out-of-memory report) is the finding's evidence.
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => void (stderr = (stderr + d.toString()).slice(-3000)));
    const ready = await new Promise<Extract<HostMessage, { type: 'ready' }>>((resolve, reject) => {
      child.on('message', (m: HostMessage) => m.type === 'ready' && resolve(m));
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the server process exited with code ${code} before it was ready: ${stderr}`)));
    });
    return new Generation(child, () => stderr, ready, ou, admin);
  }

  async send(method: string, path: string, body?: string, token: string | null = ROOT): Promise<Answer> {
    const started = performance.now();
    const headers: Record<string, string> = { ...(token ? { 'x-vault-token': token } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
    try {
      const res = await fetch(`${this.url}/v1/${path}`, { method, headers, body, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      return { status: res.status, text: await res.text(), ms: performance.now() - started };
    } catch (err) {
      const timedOut = (err as Error).name === 'TimeoutError';
      return { status: timedOut ? 'timeout' : 'no answer', text: timedOut ? '' : String((err as Error).cause ?? err), ms: performance.now() - started };
    }
  }

  /** Whether the server's event loop still turns: a round trip through its IPC channel. */
  async responsive(): Promise<boolean> {
    if (this.crash) return false;
    const id = ++this.#ping;
    const ok = await new Promise<boolean>((resolve) => {
      this.#pings.set(id, () => resolve(true));
      setTimeout(() => resolve(false), PING_TIMEOUT_MS).unref();
      this.child.send({ type: 'ping', id }, (err) => err && resolve(false));
    });
    this.#pings.delete(id);
    return ok;
  }

  /**
   * Whether the server's loop still turns, and what it logged up to now: the pong travels behind every line the
   * server sent, so each has arrived when it does.
   */
  async settle(): Promise<{ frozen: boolean; logs: LoggedError[] }> {
    const frozen = !(await this.responsive());
    return { frozen, logs: this.logs.splice(0) };
  }

  async stop(): Promise<void> {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      const exited = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.kill('SIGKILL');
      await exited;
    }
    await this.ou.cleanup().catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Fixtures: what each mount's paths act on, restored before each group, and the valid bodies the hostile field is
// put into (so a request passes the other fields' checks and reaches the handler).

interface State { baselines: Record<string, Record<string, unknown>>; jwt: string }

const ldapRole = (ou: IsolatedOu) => ({
  creation_ldif: `dn: cn={{.Username}},${ou.usersDn}\nobjectClass: inetOrgPerson\ncn: {{.Username}}\nsn: {{.DisplayName}}\nuserPassword: {{.Password}}\n`,
  deletion_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
  rollback_ldif: `dn: cn={{.Username}},${ou.usersDn}\nchangetype: delete\n`,
  default_ttl: '1h', max_ttl: '2h',
});

const LDAP_CONFIG_DEFAULTS = {
  password_policy: '', schema: 'openldap', credential_type: 'password', userattr: 'cn', upndomain: '', connection_timeout: 0, starttls: false,
  insecure_tls: false, certificate: '', client_tls_cert: '', client_tls_key: '', tls_min_version: 'tls12', tls_max_version: 'tls13',
  case_sensitive_names: false, skip_static_role_import_rotation: false, length: 0,
};

/** Requests that use what a write stored, sent after each accepted write to the path that stores it. */
const USES: Record<string, Array<[method: string, path: string]>> = {
  'ldap/config': [['GET', 'ldap/creds/fuzz'], ['POST', 'ldap/rotate-role/fuzz']],
  'ldap/static-role/fuzz': [['POST', 'ldap/rotate-role/fuzz'], ['GET', 'ldap/static-cred/fuzz']],
  'ldap/role/fuzz': [['GET', 'ldap/creds/fuzz']],
  'ldap/library/fuzz': [['POST', 'ldap/library/fuzz/check-out'], ['POST', 'ldap/library/manage/fuzz/check-in']],
  'cloud/config': [['GET', 'cloud/creds/fuzz']],
  'cloud/roles/fuzz': [['GET', 'cloud/creds/fuzz']],
  'auth/cloud/config': [['POST', 'auth/cloud/login']],
  'auth/cloud/role/fuzz': [['POST', 'auth/cloud/login']],
  'sys/policies/password/fuzz': [['GET', 'sys/policies/password/fuzz/generate']],
  'identity/oidc/key/fuzz': [['POST', 'identity/oidc/key/fuzz/rotate']],
  // A sealed server would answer every later request 503: each accepted seal is undone with the unseal key.
  'sys/seal': [['POST', 'sys/unseal']],
};

/** The server's unseal key, known to the test so that sys/unseal (and sys/generate-root/update) get a valid baseline. */
const UNSEAL_KEY = randomBytes(32).toString('base64');

class Fuzz {
  gen!: Generation;
  state: State = { baselines: {}, jwt: '' };
  readonly findings: Finding[] = [];
  heldBack = 0;
  /** Error lines the server logged beside an answer below 500 (printed, not judged: an upstream may refuse). */
  readonly serverErrors: string[] = [];
  readonly statuses = new Map<string, number>();
  restarts = 0;
  readonly choice = new Choice(SEED);
  readonly facts: SlapdFacts;
  readonly cloud: CloudWorld;

  constructor(facts: SlapdFacts, cloud: CloudWorld) {
    this.facts = facts;
    this.cloud = cloud;
  }

  async http(method: string, path: string, body?: string, token: string | null = ROOT): Promise<Answer> {
    const answer = await this.gen.send(method, path, body, token);
    const status = typeof answer.status === 'number' ? `${Math.floor(answer.status / 100)}xx` : answer.status;
    this.statuses.set(status, (this.statuses.get(status) ?? 0) + 1);
    return answer;
  }

  async start(admin: SeededApp): Promise<void> {
    this.gen = await Generation.start(this.facts, this.cloud, admin);
    this.state.jwt = await this.cloud.emu.miTokens.mint({ identity: { principalId: admin.servicePrincipalId, clientId: admin.appId }, audience: RESOURCE });
    for (const mount of ['ldap/', 'cloud/', 'auth/cloud/', 'identity/', 'auth/token/', 'sys/']) await this.reset(mount);
  }

  /** A fixture request: anything but success means the fuzz left the server unable to do its normal work. */
  async must(method: string, path: string, body?: Record<string, unknown>): Promise<any> {
    const a = await this.http(method, path, body === undefined ? undefined : JSON.stringify(body));
    if (typeof a.status !== 'number' || a.status >= 300) throw new Error(`fixture ${method} ${path} failed: ${a.status} ${a.text.slice(0, 500)}`);
    return a.text ? JSON.parse(a.text) : undefined;
  }

  /** Restores an object whatever a previous request left in it: writes are partial updates, so it is made anew. */
  async replace(path: string, body: Record<string, unknown>): Promise<void> {
    await this.http('DELETE', path);
    await this.must('POST', path, this.state.baselines[path] = body);
  }

  /** A set whose accounts are checked out cannot lose them; whatever a request added, it is all checked in. */
  async checkInAll(): Promise<void> {
    const set = await this.http('GET', 'ldap/library/fuzz');
    if (set.status !== 200) return;
    const names = JSON.parse(set.text).data.service_account_names as string[];
    await this.must('POST', 'ldap/library/manage/fuzz/check-in', { service_account_names: names });
  }

  async reset(mount: string): Promise<void> {
    const { ou, admin } = this.gen;
    const b = this.state.baselines;
    const svc = ou.serviceAccounts;
    switch (mount) {
      case 'ldap/':
        // The config cannot be deleted under its roles, so every field is sent with its default.
        await this.must('POST', 'ldap/config', b['ldap/config'] = ouConfig(this.facts, ou, LDAP_CONFIG_DEFAULTS));
        await this.checkInAll();
        await this.replace('ldap/static-role/fuzz', { username: svc[0].name, rotation_period: '24h' });
        await this.replace('ldap/role/fuzz', ldapRole(ou));
        await this.replace('ldap/library/fuzz', { service_account_names: [svc[1].name, svc[2].name], ttl: '1h', max_ttl: '2h' });
        b['ldap/library/fuzz/check-out'] = { ttl: '10m' };
        b['ldap/library/fuzz/check-in'] = b['ldap/library/manage/fuzz/check-in'] = { service_account_names: [svc[1].name, svc[2].name] };
        break;
      case 'cloud/': {
        const subscription = this.cloud.tenant.subscriptionId;
        await this.replace('cloud/config', { subscription_id: subscription, tenant_id: this.cloud.emu.tenantId, client_id: admin.appId, client_secret: admin.clientSecret, environment: ENV_NAME });
        await this.replace('cloud/roles/fuzz', { cloud_roles: JSON.stringify([{ role_name: 'Reader', scope: `/subscriptions/${subscription}` }]), ttl: '1h', max_ttl: '2h' });
        break;
      }
      case 'auth/cloud/':
        await this.replace('auth/cloud/config', { tenant_id: this.cloud.emu.tenantId, resource: RESOURCE, environment: ENV_NAME, client_id: admin.appId, client_secret: admin.clientSecret, retry_delay: '0s', max_retry_delay: '1s' });
        await this.replace('auth/cloud/role/fuzz', { bound_service_principal_ids: admin.servicePrincipalId, token_policies: 'default', token_ttl: '1h' });
        b['auth/cloud/login'] = { role: NAME, jwt: this.state.jwt };
        break;
      case 'identity/':
        await this.replace('identity/oidc/key/fuzz', { rotation_period: '24h', verification_ttl: '24h' });
        break;
      case 'auth/token/': {
        const child = await this.must('POST', 'auth/token/create', { policies: ['default'], ttl: '1h' });
        b['auth/token/lookup'] = b['auth/token/renew'] = b['auth/token/revoke'] = b['auth/token/revoke-orphan'] = { token: child.auth.client_token };
        b['auth/token/lookup-accessor'] = b['auth/token/renew-accessor'] = b['auth/token/revoke-accessor'] = { accessor: child.auth.accessor };
        break;
      }
      case 'sys/': {
        await this.http('POST', 'sys/mounts/fuzz', JSON.stringify({ type: 'ldap' }));
        await this.http('POST', 'sys/auth/fuzz', JSON.stringify({ type: 'cloud' }));
        const policy = { policy: 'path "ldap/*" { capabilities = ["read"] }' };
        await this.replace('sys/policies/acl/fuzz', policy);
        b['sys/policy/fuzz'] = policy;
        await this.replace('sys/policies/password/fuzz', { policy: 'length = 20\nrule "charset" {\n  charset = "abcdefghij0123456789"\n}\n' });
        // A lease to renew and revoke, from the LDAP fixtures as the last reset of ldap/ left them.
        if ((await this.http('GET', 'ldap/role/fuzz')).status !== 200) await this.reset('ldap/');
        const lease = await this.must('GET', 'ldap/creds/fuzz');
        b['sys/leases/lookup'] = b['sys/leases/renew/fuzz'] = b['sys/leases/revoke/fuzz'] = { lease_id: lease.lease_id, increment: '1h' };
        b['sys/capabilities-self'] = { paths: ['ldap/config', 'sys/mounts'] };
        b['sys/mounts/fuzz'] = { type: 'ldap' };
        b['sys/auth/fuzz'] = { type: 'cloud' };
        // An audit device that writes nowhere: while it is enabled, every request's entries are built from hostile input.
        b['sys/audit/fuzz'] = { type: 'file', options: { file_path: 'discard' } };
        await this.http('PUT', 'sys/audit/fuzz', JSON.stringify(b['sys/audit/fuzz']));
        b['sys/audit-hash/fuzz'] = { input: 'x' };
        b['sys/unseal'] = b['sys/generate-root/update'] = { key: UNSEAL_KEY };
        break;
      }
    }
  }

  async run(group: Group): Promise<void> {
    await this.reset(group.mount);
    // A delete handler reads few fields, so it gets two values per field.
    for (const field of group.fields) {
      for (const h of group.method === 'DELETE' ? [this.choice.pick(HOSTILE), this.choice.pick(HOSTILE)] : this.choice.values(field)) {
        await this.one(group, field.name, h.label, this.body(group, { [field.name]: h.json }));
      }
    }
    for (let i = 0; i < (group.method === 'DELETE' ? 3 : 5); i++) {
      const sent: Record<string, string> = Object.fromEntries(group.fields.map((f) => [f.name, this.choice.pick(HOSTILE).json]));
      const extras = i === 0 ? Array.from({ length: 2000 }, (_, k) => `unknown_${k}`) : Array.from({ length: i % 4 }, () => this.choice.pick(UNKNOWN_KEYS));
      for (const k of extras) sent[k] = this.choice.pick(HOSTILE).json;
      await this.one(group, i === 0 ? '(every field, 2000 unknown keys)' : '(every field, unknown keys)', 'mixed', this.body(group, sent, false));
    }
  }

  /** The path's valid baseline with `hostile` (raw JSON per key) over it. */
  body(group: Group, hostile: Record<string, string>, baseline = true): string {
    const base = baseline ? this.state.baselines[group.path] ?? {} : {};
    const entries = new Map<string, string>(Object.entries(base).map(([k, v]) => [k, JSON.stringify(v)]));
    for (const [k, json] of Object.entries(hostile)) entries.set(k, json);
    return `{${[...entries].map(([k, json]) => `${JSON.stringify(k)}:${json}`).join(',')}}`;
  }

  async one(group: Group, field: string, label: string, body: string): Promise<void> {
    const cause: Cause = { method: group.method, path: group.path, field, value: label };
    if (KNOWN.some((k) => k.method === cause.method && k.path === cause.path && k.field === cause.field && (k.values.includes('*') || k.values.includes(cause.value)))) {
      this.heldBack++;
      return;
    }
    if (group.operation === 'create') await this.http('DELETE', group.path);
    // A -self path acts on the caller's own token: each request brings a throwaway one, never root.
    const token = group.path.endsWith('-self') ? (await this.must('POST', 'auth/token/create', { policies: ['default'], ttl: '1h' })).auth.client_token as string : ROOT;
    const answer = await this.judge(group, cause, group.method, group.path, { body, token });
    if (typeof answer.status !== 'number' || answer.status >= 300 || group.method === 'DELETE') return;
    // Accepted: read it back, and use what it stored.
    if (group.readable) await this.judge(group, cause, 'GET', group.path);
    for (const [method, path] of USES[group.path] ?? []) {
      const useBody = this.state.baselines[path];
      // A config can be well-formed and still name a directory or tenant that refuses it (a upndomain no bind DN
      // takes, StartTLS against a CA we do not trust): then the use is rightly a 502. Everything else is judged.
      await this.judge(group, cause, method, path, { body: useBody && JSON.stringify(useBody), upstreamMayRefuse: true });
    }
  }

  /**
   * Sends one request and records a finding for an answer >= 500, no answer in time, a frozen or dead server, or
   * a timer the server armed past Node's 32-bit limit (Node fires such a timer after 1 ms instead: a duration that
   * reached a timer unbounded).
   */
  async judge(group: Group, cause: Cause, method: string, path: string, opts: { body?: string; token?: string; upstreamMayRefuse?: boolean } = {}): Promise<Answer> {
    const answer = await this.http(method, path, opts.body, opts.token);
    const { frozen, logs } = await this.gen.settle();
    const failed = typeof answer.status !== 'number' || (answer.status >= 500 && !(answer.status === 502 && opts.upstreamMayRefuse));
    const overflow = logs.some((l) => l.msg === TIMER_OVERFLOW);
    if (!failed && !overflow && !frozen && !this.gen.crash) {
      this.serverErrors.push(...logs.map((l) => `${method} ${path} after ${describeCause(cause)}: ${describeLog(l)}`));
      return answer;
    }
    const finding: Finding = {
      cause, request: `${method} ${path}`, operation: group.operation, status: answer.status, ms: Math.round(answer.ms), answer: answer.text.slice(0, 300),
      server: [...logs.map(describeLog), ...(frozen && !this.gen.crash ? ['the server\'s event loop does not answer'] : []), ...(this.gen.crash ? [this.gen.crash] : [])].join(' | '),
    };
    this.findings.push(finding);
    if (frozen || this.gen.crash) await this.restart();
    return answer;
  }

  /** Replaces a frozen or dead server with a fresh one and its fixtures, so one freeze does not end the run. */
  async restart(): Promise<void> {
    if (++this.restarts > MAX_RESTARTS) throw new Error(`gave up after ${MAX_RESTARTS} restarts:\n${report(this.findings)}`);
    await this.gen.stop();
    // The old admin's secret may be gone (the server was told to rotate it, or was half way through).
    await this.start(seedApp(this.cloud.emu.state, { displayName: 'strongroom-admin', graphPermissions: ADMIN_GRAPH_PERMISSIONS, ownerOf: [this.cloud.tenant.subscriptionId] }));
  }
}

/** The hostile write a finding follows from: the request itself, or the read or use sent after it was accepted. */
interface Cause { method: string; path: string; field: string; value: string }

interface Finding {
  cause: Cause; request: string; operation: string; status: Answer['status']; ms: number; answer: string; server: string;
}

const describeCause = (c: Cause) => `${c.method} ${c.path} ${c.field}=${c.value}`;

function describeLog(l: LoggedError): string {
  const at = l.err?.stack?.split('\n').find((line) => line.includes('/src/'))?.trim() ?? '';
  return `${l.msg ?? ''}: ${l.err?.message ?? ''} ${at}`.trim();
}

function report(findings: Finding[]): string {
  return findings.map((f) => {
    const then = f.request === `${f.cause.method} ${f.cause.path}` ? '' : `, then ${f.request}`;
    return `${describeCause(f.cause)} [${f.operation}${then}] -> ${f.status} after ${f.ms} ms\n    answer: ${f.answer}\n    server: ${f.server}`;
  }).join('\n');
}

// ---------------------------------------------------------------------------------------------------------------

/** The environment variable that makes this file the server process rather than the test. */
const HOST = 'FUZZ_WRITE_ENDPOINTS_HOST';
const TIMER_OVERFLOW = 'TimeoutOverflowWarning';
interface HostInit { envFile: string; unsealKey: string }
type HostMessage =
  | { type: 'ready'; url: string; paths: PathInfo[] }
  | { type: 'log'; line: string }
  | { type: 'pong'; id: number };

const hostInit = process.env[HOST];
if (hostInit) await host(JSON.parse(hostInit) as HostInit);
else {
  describe('fuzz of every write endpoint', () => {
    const facts = inject('slapd');
    let cloud: CloudWorld;
    let fuzz: Fuzz;

    beforeAll(async () => {
      cloud = await startCloudWorld();
      fuzz = new Fuzz(facts, cloud);
      await fuzz.start(cloud.tenant.admin);
    });
    afterAll(async () => {
      await fuzz?.gen?.stop();
      await cloud?.emu.close();
    });

    it('"0 answers ≥ 500 to hostile field values, and the server is healthy at the end"', async () => {
      const started = performance.now();
      // Nothing is skipped. No request can break the test itself: every capture is "fuzz" (a spare mount, never the
      // mounts under test), a -self path gets a throwaway token (never root), both rotate-root paths rotate this run's
      // own accounts (an isolated OU's bind account, an admin application of our own), and sys/seal is undone at once.
      const groups = fuzz.gen.paths.flatMap(groupsOf);
      // Both rotate-root paths rotate the credentials every fixture is restored with, so they go last.
      groups.sort((a, b) => Number(a.path.endsWith('rotate-root')) - Number(b.path.endsWith('rotate-root')));
      for (const group of groups) await fuzz.run(group);

      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      const requests = [...fuzz.statuses.values()].reduce((a, b) => a + b, 0);
      console.log(`fuzz: ${requests} requests (${[...fuzz.statuses].sort().map(([k, n]) => `${n} ${k}`).join(', ')}) to ${groups.length} endpoint operations in ${seconds} s, ${fuzz.restarts} restarts`);
      if (fuzz.serverErrors.length) console.log(`fuzz: ${fuzz.serverErrors.length} error lines logged beside answers below 500:\n${fuzz.serverErrors.join('\n')}`);
      if (fuzz.heldBack) console.log(`fuzz: ${fuzz.heldBack} requests held back by KNOWN:\n${KNOWN.map((k) => `${k.method} ${k.path} ${k.field}=${k.values.join(' | ')}: ${k.why}`).join('\n')}`);
      expect(fuzz.findings.length, `${fuzz.findings.length} answers >= 500 or no answer in time:\n${report(fuzz.findings)}\n`).toBe(0);

      expect(await fuzz.gen.responsive()).toBe(true);
      expect((await fuzz.gen.send('GET', 'sys/health', undefined, null)).status).toBe(200);
      // Normal work after the run, with the bind password the last group rotated.
      expect((await fuzz.gen.send('POST', 'ldap/rotate-role/fuzz')).status).toBe(204);
      const cred = JSON.parse((await fuzz.gen.send('GET', 'ldap/static-cred/fuzz')).text);
      expect(cred.data.username).toBe(fuzz.gen.ou.serviceAccounts[0].name);
      expect(await canBind(fuzz.facts.url, fuzz.gen.ou.serviceAccounts[0].dn, cred.data.password)).toBe(true);
    }, 300_000);
  });
}

/** The server process's part: the server under test with every engine, its error log lines sent to the test. */
async function host(init: HostInit): Promise<void> {
  const send = (m: HostMessage) => process.send!(m);
  // Without the test there is nothing to answer: the IPC channel closing (the test process died) ends this one.
  process.on('disconnect', () => process.exit(0));
  // The cloud auth method reads the emulator's environment file from the process environment.
  process.env.CLOUD_ENVIRONMENT_FILEPATH = init.envFile;
  const settings = loadSettings({
    STRONGROOM_DEV: '1', STRONGROOM_DEV_ROOT_TOKEN: ROOT, STRONGROOM_STORAGE: 'memory', STRONGROOM_UNSEAL_KEY: init.unsealKey, STRONGROOM_LOG_LEVEL: 'error',
  }, []);
  const logger = createLogger('error', { write: (line: string) => send({ type: 'log', line }) });
  const cloud = cloudSecretsEngine({ env: { CLOUD_ENVIRONMENT_FILEPATH: init.envFile }, retry: FAST_RETRY, rotateRoot: { propagation: { baseDelayMs: 20, deadlineMs: 3_000 } } });
  const server = await createServer(settings, logger, { backends: { secret: { ...backendTypes.secret, cloud }, auth: backendTypes.auth } });
  const url = await server.app.listen({ host: '127.0.0.1', port: 0 });
  process.on('warning', (w) => {
    if (w.name === TIMER_OVERFLOW) send({ type: 'log', line: JSON.stringify({ msg: TIMER_OVERFLOW, err: { message: w.message, stack: w.stack } }) });
  });
  process.on('message', (m: { type: 'ping'; id: number }) => send({ type: 'pong', id: m.id }));
  const paths = server.core.mounts.all().flatMap((entry) => server.core.mountedBackend(entry.path)!.paths.map((p) => ({
    mount: entry.path, pattern: p.pattern, fields: Object.entries(p.fields ?? {}).map(([name, def]) => ({ name, kind: def.kind })), operations: Object.keys(p.operations),
  })));
  send({ type: 'ready', url, paths });
}
