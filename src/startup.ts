import { UnsealError } from './core/barrier.ts';
import { StoreInUseError } from './core/storage/sqlite-lock.ts';
import { StorageUnavailableError } from './core/storage/types.ts';
import { VERSION } from './core/version.ts';
import { StartupError } from './server.ts';
import { SettingsError, settingsSchema } from './settings.ts';

/**
 * What the server process tells its operator outside the JSON log: how it is started (`--help`), why it did not start
 * (one line and an exit code each), and the few things a human must see (blocks on stderr).
 */
export const EXIT = {
  stopped: 0,
  unexpected: 1,
  settings: 2,
  unseal: 3,
  storageFailed: 4,
  storageUnreachable: 5,
  bootstrap: 6,
  storeInUse: 7,
  listen: 8,
} as const;

/** Each exit code with what it means for the operator, as `--help` and the README list them. */
export const EXIT_CODES: Array<[number, string]> = [
  [EXIT.stopped, 'stopped by SIGTERM or SIGINT'],
  [EXIT.unexpected, 'anything else (a bug: please report it)'],
  [EXIT.settings, 'a setting, flag or file it names is invalid or unreadable, or the bootstrap file is invalid (nothing was changed)'],
  [EXIT.unseal, 'the unseal key does not open the store, or is missing for a store that has one (nothing was changed)'],
  [EXIT.storageFailed, 'storage failed while running (start again)'],
  [EXIT.storageUnreachable, 'the database could not be reached at start (start again once it is up)'],
  [EXIT.bootstrap, 'the bootstrap file could not be applied (what was applied before stays)'],
  [EXIT.storeInUse, 'the SQLite store is in use by another Strongroom process'],
  [EXIT.listen, 'the listen address is in use, not on this host, or not allowed'],
];

const flagOf = (name: string) => `--${name.slice('STRONGROOM_'.length).toLowerCase().replace(/_/g, '-')}`;

/** The default a setting's definition gives it, as an operator would write it. */
function defaultOf(schema: unknown): string {
  const def = (schema as { def: { type: string; defaultValue?: unknown } }).def;
  if (def.type === 'default' || def.type === 'prefault') return String(def.defaultValue);
  return 'unset';
}

export function usage(): string {
  const rows = Object.entries(settingsSchema.shape).map(([name, schema]) => [flagOf(name), name, defaultOf(schema)]);
  const width = (i: number) => Math.max(...rows.map((r) => r[i].length));
  const lines = rows.map(([flag, env, def]) => `  ${flag.padEnd(width(0))}  ${env.padEnd(width(1))}  ${def}`);
  return [
    `strongroom ${VERSION}: a secrets server that speaks the Vault HTTP API`,
    '',
    'Usage: node src/main.ts [--flag=value ...]      (npm start -- --flag=value ...)',
    '       node src/main.ts --help | --version',
    '',
    'Every setting is an environment variable or the matching flag (a flag wins); .env.example describes each.',
    'Unset storage means sqlite:./data/strongroom.db, or memory in dev mode.',
    '',
    `  ${'flag'.padEnd(width(0))}  ${'variable'.padEnd(width(1))}  default`,
    ...lines,
    '',
    'Exit codes:',
    ...EXIT_CODES.map(([code, meaning]) => `  ${code}  ${meaning}`),
    '',
  ].join('\n');
}

/**
 * A start-up failure as one line and its exit code. Errors of no known kind keep their message (never a stack trace)
 * and exit 1.
 */
export function startupFailure(err: unknown): { code: number; line: string } {
  const message = (err as Error)?.message ?? String(err);
  if (err instanceof SettingsError) return { code: EXIT.settings, line: `invalid settings: ${message}` };
  if (err instanceof StartupError) return { code: EXIT.settings, line: message };
  if (err instanceof UnsealError) return { code: EXIT.unseal, line: `cannot unseal the store: ${message}. Nothing was changed.` };
  if (err instanceof StorageUnavailableError) return { code: EXIT.storageUnreachable, line: `${message}. Start again once the database is reachable.` };
  if (err instanceof StoreInUseError) return { code: EXIT.storeInUse, line: message };
  return { code: EXIT.unexpected, line: `start-up failed: ${message}` };
}

/** Why the listener could not be opened on `addr`, in the operator's terms. */
export function listenFailure(err: unknown, addr: string): { code: number; line: string } {
  const { code, message } = err as NodeJS.ErrnoException;
  const why = code === 'EADDRINUSE' ? 'the address is in use (another process listens there)'
    : code === 'EADDRNOTAVAIL' ? 'the address is not one of this host\'s'
      : code === 'EACCES' ? 'permission denied (ports below 1024 need privileges)'
        : message;
  return { code: EXIT.listen, line: `cannot listen on ${addr}: ${why} (set STRONGROOM_ADDR or --addr)` };
}

/** A block on stderr that stands out from the JSON log: a human must read it. */
export function notice(title: string, lines: string[]): string {
  const rule = '='.repeat(78);
  return `\n${rule}\n!!! ${title}\n${lines.map((l) => `    ${l}\n`).join('')}${rule}\n\n`;
}
