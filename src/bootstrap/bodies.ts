/**
 * Each body the file sends, checked against the endpoint it goes to before anything is applied. The server accepts a
 * body key when the endpoint declares it as a field or captures it from the path, and only warns about (and drops)
 * any other; here any other is an error, so a misspelt field cannot be lost silently. The endpoint is found as the
 * server would route the object's path: the longest declared (or built-in) mount, then that type's path table
 * (endpoints.ts). Deprecated aliases the server still accepts (an auth role's `policies`, a token's `lease`) are
 * fields of their endpoints, so they pass. Audit device options depend on the device type and are judged by the
 * audit code itself.
 */
import { deviceConfig, deviceOptionNames, type AuditSettings } from '../core/audit/options.ts';
import { parseDurationSecond } from '../core/durations.ts';
import { BadRequestError } from '../core/errors.ts';
import { reservedPolicyIn } from '../core/policy/reserved.ts';
import { validateFields } from '../core/fields.ts';
import { BUILTIN_MOUNTS, endpointAt, registeredType, roleKinds, typeNames, type MountRef } from './endpoints.ts';
import { declaredObjects } from './plan.ts';
import type { AuditDevice, BootstrapFile, RoleKind, TokenSpec, YamlPath } from './schema.ts';

type Add = (path: YamlPath, message: string) => void;

/**
 * Unknown mount types, every body key its endpoint does not accept, and every value its field refuses (as the server
 * decodes it, once references resolve). A value something else already reported (`reported`) is not judged again;
 * one that came from a reference (`fromReference`) is refused without the field's message, which may quote it.
 */
export function checkBodies(spec: BootstrapFile, add: Add, reported: (at: YamlPath) => boolean, fromReference: (at: YamlPath) => boolean): void {
  const mounts = new Map<string, MountRef | undefined>(Object.entries(BUILTIN_MOUNTS));
  for (const [cls, list] of [['secret', spec.mounts], ['auth', spec.auth]] as const) {
    list?.forEach((m, i) => {
      const full = `${cls === 'auth' ? 'auth/' : ''}${m.path}/`;
      // A declared auth/token is refused by the rules; its objects still route to the built-in.
      if (mounts.has(full)) return;
      const known = registeredType(cls, m.type) !== undefined;
      if (!known) add([cls === 'auth' ? 'auth' : 'mounts', i, 'type'], `unknown ${cls === 'auth' ? 'auth method' : 'secrets engine'} type "${m.type}" (expected one of ${typeNames(cls).join(', ')})`);
      mounts.set(full, known ? { class: cls, type: m.type } : undefined);
    });
  }
  for (const d of declaredObjects(spec, fromReference)) {
    const prefix = [...mounts.keys()].filter((p) => d.path.startsWith(p)).reduce((a, b) => (b.length > a.length ? b : a), '');
    const mount = mounts.get(prefix);
    // An unknown type was reported above.
    if (!mount) continue;
    const match = endpointAt(mount, d.path.slice(prefix.length));
    if (!match) {
      if (!lacksKind(spec, d.at)) add(d.at, `the server has no endpoint ${d.path} (is the name one the endpoint accepts?)`);
      continue;
    }
    const fields = match.def.fields ?? {};
    const known = [...Object.keys(fields), ...Object.keys(match.params)];
    for (const [key, value] of Object.entries(d.body)) {
      if (!known.includes(key)) add([...d.at, key], `unknown field "${key}" for ${d.path}${suggestion(key, known)}`);
      else if (Object.hasOwn(fields, key) && !reported([...d.at, key])) {
        const [error] = validateFields({ [key]: fields[key] }, { [key]: value }).errors;
        // A field's message may quote the value, which a reference may have brought from a secret.
        if (error) add([...d.at, key], fromReference([...d.at, key]) ? `invalid value for field "${key}": refused once its reference resolved (the value is not shown)` : error);
      }
    }
  }
}

/** Whether `at` is a role of a kind its mount's type lacks: the rules reported the kind, and it has no endpoint. */
function lacksKind(spec: BootstrapFile, at: YamlPath): boolean {
  const [cls, i, kind] = at;
  if (at.length !== 4 || (cls !== 'mounts' && cls !== 'auth')) return false;
  const type = spec[cls]![i as number].type;
  return !roleKinds(cls === 'auth' ? 'auth' : 'secret', type).includes(kind as RoleKind);
}

/** Audit devices' options, by the rules the server enables a device with (after references resolve: they are values). */
export function checkAuditDevices(devices: ReadonlyArray<AuditDevice> | undefined, settings: AuditSettings, add: Add, reported: (at: YamlPath) => boolean): void {
  devices?.forEach((d, i) => {
    const at: YamlPath = ['audit', i];
    const allowed = deviceOptionNames(d.type);
    const options = d.options ?? {};
    const unknown = allowed ? Object.keys(options).filter((k) => !allowed.includes(k)) : [];
    for (const key of unknown) add([...at, 'options', key], `unknown option "${key}" for a ${d.type} audit device${suggestion(key, allowed!)}`);
    if (unknown.length || (allowed && reported([...at, 'options']))) return;
    try {
      // Built, not opened: nothing is written or connected to here. Values are sent as the API's key=value strings.
      deviceConfig(d.type, Object.fromEntries(Object.entries(options).map(([k, v]) => [k, String(v)])), settings);
    } catch (err) {
      if (!(err instanceof BadRequestError)) throw err;
      add([...at, allowed ? 'options' : 'type'], err.message);
    }
  });
}

/**
 * No path to root through the file (docs/security.md): a declared token holds no reserved policy (`root`,
 * `response-wrapping`, in any spelling the server would accept), and does not renew forever (a `period` needs an
 * `explicit_max_ttl` that ends it). The server's create-orphan, called with the bootstrap's root token, would
 * allow both. Judged on resolved values, without quoting them.
 */
export function checkDeclaredTokens(tokens: ReadonlyArray<TokenSpec> | undefined, add: Add, reported: (at: YamlPath) => boolean): void {
  tokens?.forEach((t, i) => {
    const at: YamlPath = ['tokens', i];
    const policies = Array.isArray(t.policies) ? t.policies.map(String) : typeof t.policies === 'string' ? t.policies.split(',') : [];
    const reserved = reservedPolicyIn(policies);
    if (reserved) add([...at, 'policies'], `a declared token cannot hold the reserved "${reserved}" policy`);
    const seconds = (key: string) => {
      const v = t[key];
      if (v === undefined || reported([...at, key]) || (typeof v !== 'string' && typeof v !== 'number')) return 0;
      try {
        return parseDurationSecond(v);
      } catch {
        return 0;
      }
    };
    if (seconds('period') > 0 && seconds('explicit_max_ttl') <= 0) {
      add([...at, 'period'], 'a declared token cannot renew forever: a period needs an explicit_max_ttl that ends it');
    }
  });
}

/** `; did you mean "x"?` when one known name is obviously meant, for the end of an unknown key's message. */
export function suggestion(key: string, known: readonly string[]): string {
  const near = closest(key, known);
  return near ? `; did you mean "${near}"?` : '';
}

/** The one known name within a small edit distance of `key` (two edits, one for short names), if exactly one is nearest. */
function closest(key: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = key.length > 4 ? 3 : 2;
  let tie = false;
  for (const name of known) {
    const d = editDistance(key, name);
    if (d < bestDistance) [best, bestDistance, tie] = [name, d, false];
    else if (d === bestDistance) tie = true;
  }
  return tie ? undefined : best;
}

/** Edits (insert, delete, replace, swap two neighbours) from a to b: the optimal string alignment distance. */
function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => Array.from({ length: b.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)));
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.length][b.length];
}
