import { isAbsolute, resolve } from 'node:path';
import { parseDurationSecond } from '../durations.ts';
import { BadRequestError, invalidField } from '../errors.ts';
import type { EntryOptions } from './entry.ts';
import { FileSink, within } from './devices/file.ts';
import { hostPort, SocketSink, type SocketType } from './devices/socket.ts';
import type { Sink } from './devices/sink.ts';

/** Server settings that allow what an API caller with sudo should not be able to turn on alone. */
export interface AuditSettings {
  /** `prefix`: text before every line. With a writable path and a mode, it once let Vault's audit write a script. */
  allowPrefix: boolean;
  /** `log_raw`: every secret in the clear. One sudo call would otherwise turn the audit log into a copy of them. */
  allowRaw: boolean;
  /**
   * The directory file devices must write in (STRONGROOM_AUDIT_DIR); without one only `stdout` and `discard` are
   * possible. Sudo on `sys/audit` must not mean writing (or chmod-ing) any file the server's user can reach.
   */
  dir: string | undefined;
}

export interface DeviceConfig {
  sink: Sink;
  entry: EntryOptions;
  prefix: string;
}

const COMMON = ['format', 'hmac_accessor', 'log_raw', 'elide_list_responses', 'prefix'];
const BY_TYPE: Record<string, string[]> = {
  file: ['file_path', 'path', 'mode'],
  socket: ['address', 'socket_type', 'write_timeout'],
};
const SOCKET_TYPES: SocketType[] = ['tcp', 'udp', 'unix'];
const DEFAULT_WRITE_TIMEOUT_S = 2;
/** A blocked collector holds every request up to this long, so it is short. */
const MAX_WRITE_TIMEOUT_S = 60;

/** The options a device of `type` takes (its own, then the common ones), or undefined for a type there is none of. */
export function deviceOptionNames(type: string): string[] | undefined {
  return Object.hasOwn(BY_TYPE, type) ? [...BY_TYPE[type], ...COMMON] : undefined;
}

/** Checks a device's options and builds it (not yet opened); every problem is a 400 naming the option. */
export function deviceConfig(type: string, options: Record<string, string>, settings: AuditSettings): DeviceConfig {
  if (type === 'syslog') {
    throw new BadRequestError('the syslog audit device is not available: use a socket device with the syslog daemon\'s TCP or UDP input as its address (docs/audit.md)');
  }
  const allowed = deviceOptionNames(type);
  if (!allowed) throw invalidField('type', 'unknown audit device type (file or socket)');
  const unknown = Object.keys(options).filter((k) => !allowed.includes(k));
  if (unknown.length) throw new BadRequestError(`unknown ${type} audit device option${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `"${k}"`).join(', ')} (allowed: ${allowed.join(', ')})`);

  const format = options.format ?? 'json';
  if (format !== 'json') throw invalid('format', 'only "json" is supported');
  const logRaw = bool(options, 'log_raw', false);
  if (logRaw && !settings.allowRaw) throw invalid('log_raw', 'writing secrets in the clear is refused unless the server is started with STRONGROOM_AUDIT_ALLOW_RAW=true');
  const prefix = options.prefix ?? '';
  if (prefix && !settings.allowPrefix) throw invalid('prefix', 'refused unless the server is started with STRONGROOM_AUDIT_ALLOW_PREFIX=true');
  if (/[\r\n]/.test(prefix)) throw invalid('prefix', 'must not hold a line break (it would forge a line)');
  const entry = { hmacAccessor: bool(options, 'hmac_accessor', true), logRaw, elideListResponses: bool(options, 'elide_list_responses', false) };
  return { sink: type === 'file' ? fileSink(options, settings.dir) : socketSink(options), entry, prefix };
}

function fileSink(options: Record<string, string>, dir: string | undefined): Sink {
  // `path` is the name older Vault versions (and hvac's examples) use.
  const path = options.file_path ?? options.path;
  if (!path) throw new BadRequestError('missing required audit device option "file_path" (a file, "stdout" or "discard")');
  if (path !== 'stdout' && path !== 'discard') {
    if (!isAbsolute(path)) throw invalid('file_path', 'must be an absolute path, "stdout" or "discard"');
    // What the path says; the links it passes through are resolved when it is opened (FileSink), which also refuses
    // every file when no directory is configured.
    if (dir && !within(resolve(dir), resolve(path))) throw invalid('file_path', 'must be a file inside the audit directory (STRONGROOM_AUDIT_DIR)');
  }
  return new FileSink(path, fileMode(options.mode), dir);
}

function fileMode(raw: string | undefined): number {
  if (raw === undefined) return 0o600;
  if (!/^[0-7]{1,4}$/.test(raw)) throw invalid('mode', 'expected an octal file mode such as "0600"');
  const mode = parseInt(raw, 8);
  // An executable log whose lines the API shapes is a script waiting to be run.
  if (mode & 0o111) throw invalid('mode', 'an audit file may not be executable');
  if (mode > 0o777) throw invalid('mode', 'only permission bits are allowed (no setuid, setgid or sticky bit)');
  return mode;
}

function socketSink(options: Record<string, string>): Sink {
  const type = (options.socket_type ?? 'tcp') as SocketType;
  if (!SOCKET_TYPES.includes(type)) throw invalid('socket_type', 'expected "tcp", "udp" or "unix"');
  const address = options.address;
  if (!address) throw new BadRequestError('missing required audit device option "address" (host:port, or a socket path for unix)');
  if (type === 'unix' ? !isAbsolute(address) : !validHostPort(address)) throw invalid('address', type === 'unix' ? 'expected an absolute socket path' : 'expected host:port');
  let timeout = DEFAULT_WRITE_TIMEOUT_S;
  if (options.write_timeout !== undefined) {
    try {
      timeout = parseDurationSecond(options.write_timeout);
    } catch (err) {
      throw invalid('write_timeout', (err as Error).message);
    }
    if (timeout < 1 || timeout > MAX_WRITE_TIMEOUT_S) throw invalid('write_timeout', `expected from 1s to ${MAX_WRITE_TIMEOUT_S}s`);
  }
  return new SocketSink(type, address, timeout * 1000);
}

function validHostPort(address: string): boolean {
  if (!/^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):\d{1,5}$/.test(address)) return false;
  const { port } = hostPort(address);
  return port >= 1 && port <= 65535;
}

/** Vault's strconv.ParseBool spellings. */
function bool(options: Record<string, string>, name: string, fallback: boolean): boolean {
  const v = options[name];
  if (v === undefined) return fallback;
  if (['1', 't', 'T', 'true', 'TRUE', 'True'].includes(v)) return true;
  if (['0', 'f', 'F', 'false', 'FALSE', 'False'].includes(v)) return false;
  throw invalid(name, 'expected a boolean');
}

const invalid = (name: string, why: string) => new BadRequestError(`invalid value for audit device option "${name}": ${why}`);
