import { constants, writeSync } from 'node:fs';
import { open, realpath, type FileHandle } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, relative, sep } from 'node:path';
import { withoutTarget, type Sink } from './sink.ts';

const { O_WRONLY, O_APPEND, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK } = constants;
/**
 * Never through a link (the last component; the directories above are resolved and checked first), never waiting
 * for a FIFO's reader: a FIFO with none is refused at once (ENXIO), one with a reader is refused by the type check.
 */
const OPEN_EXISTING = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK;
const CREATE = OPEN_EXISTING | O_CREAT | O_EXCL;

/** A file refused before anything is written to it; the message names the rule, not the path (the caller's value). */
class AuditFileRefused extends Error {}

/**
 * A file opened for appending, or stdout, or nowhere (`file_path` = `discard`). The file must lie inside the audit
 * directory (STRONGROOM_AUDIT_DIR) once every link above it is resolved, must not be a link itself, and must be a
 * regular file: `sys/audit` needs sudo, and sudo must not reach the unseal key, the database or a FIFO that blocks.
 */
export class FileSink implements Sink {
  readonly #path: string;
  readonly #dir: string | undefined;
  /** Applies only to a file this sink creates; 0 creates it 0600. An existing file's mode is never changed. */
  readonly #mode: number;
  #handle: FileHandle | undefined;
  #closed = false;

  constructor(path: string, mode: number, dir: string | undefined) {
    this.#path = path;
    this.#mode = mode;
    this.#dir = dir;
  }

  async open(): Promise<void> {
    if (this.#path === 'stdout' || this.#path === 'discard') return;
    const target = await this.#confined();
    let handle: FileHandle;
    let created = true;
    try {
      handle = await open(target, CREATE, this.#mode || 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw refusal(err);
      created = false;
      handle = await open(target, OPEN_EXISTING).catch((e: unknown) => {
        throw refusal(e);
      });
    }
    try {
      if (!(await handle.stat()).isFile()) throw new AuditFileRefused('it is not a regular file');
      // The umask may have narrowed the mode asked for; a file created here gets exactly it.
      if (created) await handle.chmod(this.#mode || 0o600);
    } catch (err) {
      await handle.close();
      throw err;
    }
    this.#handle = handle;
  }

  /** The path with its directory's links resolved, refused unless it lies inside the audit directory. */
  async #confined(): Promise<string> {
    if (!this.#dir) throw new AuditFileRefused('no audit directory is configured (STRONGROOM_AUDIT_DIR)');
    const root = await realpath(this.#dir).catch((err: unknown) => {
      throw new AuditFileRefused(`the audit directory cannot be resolved (${withoutTarget(err).message})`);
    });
    const parent = await realpath(dirname(this.#path)).catch((err: unknown) => {
      throw withoutTarget(err);
    });
    const target = join(parent, basename(this.#path));
    if (!within(root, target)) throw new AuditFileRefused('it is outside the audit directory (STRONGROOM_AUDIT_DIR)');
    return target;
  }

  async write(lines: string[]): Promise<void> {
    if (this.#closed) throw new Error('the device is disabled');
    if (this.#path === 'discard') return;
    const data = Buffer.from(lines.length === 1 ? lines[0] : lines.join(''));
    if (this.#path === 'stdout') return writeStdout(data);
    try {
      await this.#append(data);
    } catch {
      // Vault's rule: a failed write closes the file, opens it again and tries once more (a handle gone bad, a
      // file system back after an error). Whatever the second attempt says is the answer.
      await this.#drop();
      await this.#append(data);
    }
  }

  async reopen(): Promise<void> {
    if (this.#path === 'stdout' || this.#path === 'discard' || this.#closed) return;
    await this.#drop();
    // A target that cannot be opened now is tried again by the next write, which fails until it can be.
    await this.open();
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#drop();
  }

  /**
   * Synchronous, as Vault's write is: the queue hands over a whole event-loop turn's lines at once, and one system
   * call here costs less than a trip through the thread pool, whose wake-ups cost more than the write on a small VM
   * (measured: 8,000 audited reads/s through the pool against 15,000-20,000 this way). The price: a file system
   * that blocks holds the whole process, not only the requests waiting for their entries (which could not be
   * answered anyway).
   */
  async #append(data: Buffer): Promise<void> {
    if (!this.#handle) await this.open();
    const bytesWritten = writeSync(this.#handle!.fd, data);
    if (bytesWritten !== data.length) throw new Error(`short write: ${bytesWritten} of ${data.length} bytes`);
  }

  async #drop(): Promise<void> {
    const handle = this.#handle;
    this.#handle = undefined;
    await handle?.close().catch(() => undefined);
  }
}

function writeStdout(data: Buffer): Promise<void> {
  return new Promise((resolve, reject) => process.stdout.write(data, (err) => (err ? reject(err) : resolve())));
}

/** Whether `path` names something strictly inside `root` (both absolute, without links or `..`). */
export function within(root: string, path: string): boolean {
  const rel = relative(root, path);
  return rel !== '' && rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel);
}


/** Why an open failed, in the terms of the rules above where one of them caught it. */
function refusal(err: unknown): Error {
  const code = (err as NodeJS.ErrnoException)?.code;
  if (code === 'ELOOP') return new AuditFileRefused('it is a symbolic link');
  if (code === 'ENXIO') return new AuditFileRefused('it is not a regular file (a FIFO or socket with no reader)');
  return withoutTarget(err);
}
