import { chmodSync, mkdirSync, statSync } from 'node:fs';

/**
 * The store's files are the owner's alone: values are ciphertext, but keys are clear text (lease ids, which
 * suffice to renew a lease; role, set, account and policy names), and beside them may lie the unseal key.
 */
export const PRIVATE_FILE_MODE = 0o600;
const PRIVATE_DIR_MODE = 0o700;
const STICKY = 0o1000;

/**
 * Creates `dir` (and missing parents) owner-only, and takes group and other access away from an existing one that
 * is ours. A directory shared on purpose (sticky, like /tmp) or someone else's keeps its mode: it is not ours to
 * change, and the files in it are owner-only anyway.
 */
export function privateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const { mode, uid } = statSync(dir);
  if (uid === process.getuid?.() && !(mode & STICKY) && mode & 0o077) chmodSync(dir, mode & PRIVATE_DIR_MODE);
}

/** Makes each of `paths` that exists owner-only (read and write). */
export function privateFiles(...paths: string[]): void {
  for (const path of paths) {
    try {
      chmodSync(path, PRIVATE_FILE_MODE);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
  }
}
