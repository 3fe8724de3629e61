/**
 * `npm run migrate -- --from sqlite:./data/strongroom.db --to postgres://user:password@host:5432/strongroom`
 * (Vault's `operator migrate`): copies every entry from one store to another as stored. Values are barrier
 * ciphertexts bound to their keys, so no unseal key is needed and the destination opens with the source's key.
 *
 * The destination must be empty. Afterwards both stores are read again and must hold the same number of entries with
 * the same SHA-256 over their sorted keys and values; anything else exits 1. Stop every server using the source
 * first: a SQLite store in use is refused at once (its lock, sqlite-lock.ts); a write landing in a PostgreSQL source
 * during the copy is caught by that check, not carried over.
 *
 * Exit codes: 0 copied and verified, 1 refused or not verified, 2 bad arguments.
 */
import { createHash, type Hash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { redactUrl } from './core/storage/postgres.ts';
import type { Storage, StorageOp } from './core/storage/types.ts';
import { StorageView } from './core/storage/view.ts';
import { openStorage } from './server.ts';

/** Entries copied per destination transaction, and their bytes at most: one commit each, none of them huge. */
const BATCH_ENTRIES = 500;
const BATCH_BYTES = 4 * 1024 * 1024;
/** Reads in flight at once: PostgreSQL answers each in a round trip, so one at a time would take most of the run. */
const READ_AHEAD = 64;

class Refusal extends Error {}

interface Summary {
  entries: number;
  sha256: string;
}

const USAGE = 'usage: npm run migrate -- --from <sqlite:path | postgres://...> --to <sqlite:path | postgres://...>';

function parseArgs(argv: string[]): { from: string; to: string } {
  const args = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const m = /^--(from|to)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new Refusal(`unexpected argument "${argv[i]}"`);
    args.set(m[1], m[2] ?? argv[++i] ?? '');
  }
  const from = args.get('from');
  const to = args.get('to');
  if (!from || !to) throw new Refusal('both --from and --to are required');
  for (const url of [from, to]) {
    if (!/^(sqlite:.+|postgres(ql)?:\/\/.+)$/.test(url)) throw new Refusal(`"${redactUrl(url)}" is not a store to migrate (sqlite:<path> or postgres://...)`);
  }
  if (from === to) throw new Refusal('--from and --to name the same store');
  // Opening a SQLite path creates it: a mistyped source would migrate an empty store.
  if (from.startsWith('sqlite:') && !existsSync(from.slice('sqlite:'.length))) throw new Refusal(`there is no SQLite store at ${from.slice('sqlite:'.length)}`);
  return { from, to };
}

/** Length-prefixed, so no two different sets of entries hash alike by shifting bytes between a key and a value. */
function addEntry(hash: Hash, key: string, value: Buffer): void {
  const keyBytes = Buffer.from(key);
  const lengths = Buffer.alloc(8);
  lengths.writeUInt32BE(keyBytes.length, 0);
  lengths.writeUInt32BE(value.length, 4);
  hash.update(lengths).update(keyBytes).update(value);
}

/**
 * Reads every entry in key order (a JavaScript sort, so both stores are read in the same order whatever their own
 * collation), hands each to `visit`, and sums them up.
 */
async function scan(storage: Storage, visit?: (key: string, value: Buffer) => Promise<void>): Promise<Summary> {
  // Listing is per folder: the whole store's view descends into each.
  const keys = (await new StorageView(storage, '').listRecursive()).sort();
  const hash = createHash('sha256');
  for (let i = 0; i < keys.length; i += READ_AHEAD) {
    const chunk = keys.slice(i, i + READ_AHEAD);
    const values = await Promise.all(chunk.map((key) => storage.get(key)));
    for (const [j, key] of chunk.entries()) {
      const value = values[j];
      if (value === undefined) throw new Refusal(`"${key}" disappeared while it was read: is a server still running on this store?`);
      addEntry(hash, key, value);
      await visit?.(key, value);
    }
  }
  return { entries: keys.length, sha256: hash.digest('hex') };
}

async function copy(from: Storage, to: Storage): Promise<Summary> {
  let batch: StorageOp[] = [];
  let bytes = 0;
  const flush = async () => {
    if (batch.length) await to.transaction(batch);
    batch = [];
    bytes = 0;
  };
  const copied = await scan(from, async (key, value) => {
    batch.push({ type: 'put', key, value });
    bytes += key.length + value.length;
    if (batch.length >= BATCH_ENTRIES || bytes >= BATCH_BYTES) await flush();
  });
  await flush();
  return copied;
}

async function main(): Promise<number> {
  let from: string;
  let to: string;
  try {
    ({ from, to } = parseArgs(process.argv.slice(2)));
  } catch (err) {
    process.stderr.write(`strongroom migrate: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const [fromName, toName] = [redactUrl(from), redactUrl(to)];
  const stores: Storage[] = [];
  let copying = false;
  try {
    const source = await openStorage(from);
    stores.push(source);
    const destination = await openStorage(to);
    stores.push(destination);
    if ((await source.list('')).length === 0) throw new Refusal(`the source ${fromName} holds no entries: nothing to migrate`);
    if ((await destination.list('')).length > 0) throw new Refusal(`the destination ${toName} is not empty: migrate only into a new store`);
    copying = true;
    const copied = await copy(source, destination);
    const [again, landed] = [await scan(source), await scan(destination)];
    if (again.entries !== copied.entries || again.sha256 !== copied.sha256) {
      throw new Refusal(`the source changed during the copy (${copied.entries} entries then, ${again.entries} now): stop every server using it`);
    }
    if (landed.entries !== copied.entries || landed.sha256 !== copied.sha256) {
      throw new Refusal(`the destination does not match the source: ${landed.entries} entries (SHA-256 ${landed.sha256}) against ${copied.entries} (SHA-256 ${copied.sha256})`);
    }
    const keyFile = from.startsWith('sqlite:') ? join(dirname(from.slice('sqlite:'.length)), 'unseal.key') : undefined;
    process.stdout.write([
      `Copied ${copied.entries} entries from ${fromName} to ${toName}.`,
      `Verified: both hold ${copied.entries} entries, SHA-256 ${copied.sha256}.`,
      'Next:',
      '  1. Keep every server off the source from now on (what it writes is not in the destination).',
      `  2. Start Strongroom with STRONGROOM_STORAGE=${toName} (your password in place of ***)`,
      `     and the same unseal key as before${keyFile && existsSync(keyFile) ? ` (the generated one is in ${keyFile}: pass it as STRONGROOM_UNSEAL_KEY_FILE)` : ''}.`,
      '  3. Keep the source until the new store has served for a while; then remove it.',
      '',
    ].join('\n'));
    return 0;
  } catch (err) {
    const partial = copying ? ` The destination ${toName} may now hold part of the data: empty it (a new database or file) before migrating again.` : '';
    process.stderr.write(`strongroom migrate: ${(err as Error).message}.${partial}\n`);
    return 1;
  } finally {
    for (const store of stores) await store.close();
  }
}

process.exitCode = await main();
