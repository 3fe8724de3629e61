import type { Logger } from 'pino';
import type { Cluster } from './cluster.ts';
import { ConflictError } from './errors.ts';
import { fenceWrite } from './fence.ts';
import type { StorageCondition } from './storage/types.ts';
import type { StorageView } from './storage/view.ts';

/**
 * The marks of mounts being disabled or moved (`sys/disabling/<path>`): while one stands, the mount's requests are
 * refused and no lease or login token can land for it (`notDisabling` guards those writes).
 */
export class DisableMarks {
  declare readonly systemView: StorageView;
  declare readonly cluster: Pick<Cluster, 'nodeId' | 'alive' | 'fence'>;
  declare readonly logger: Logger;

  constructor(deps: Pick<DisableMarks, 'systemView' | 'cluster' | 'logger'>) {
    Object.assign(this, deps);
  }

  /**
   * Marks a mount as being disabled or moved, once across the cluster: a second disable or move of it, on any node,
   * is refused until this one ends. The mark names this node, so a mark whose node died can be told from one at work.
   */
  async markDisabling(fullPath: string, refusal: string): Promise<string> {
    const marker = this.#disablingKey(fullPath);
    const marked = this.#disabling.has(fullPath) ? false : await this.systemView.transaction([{ type: 'put', key: marker, value: Buffer.from(this.cluster.nodeId) }], [{ key: marker, expected: undefined }]);
    if (!marked) throw new ConflictError(refusal);
    this.#disabling.add(fullPath);
    return marker;
  }

  /** Ends a disable or move this node marked, done or not. */
  async unmark(fullPath: string, marker: string): Promise<void> {
    this.#disabling.delete(fullPath);
    await this.systemView.delete(marker);
  }

  /**
   * A disable or remount the process did not live to finish leaves its mark, which would refuse every new lease
   * of the mount for good. The mount is still in the table (removing it is the last step), so the operation simply
   * did not happen: the mark goes, and the operator runs it again.
   */
  async clearInterruptedDisables(): Promise<void> {
    for (const key of await this.systemView.list('disabling/')) {
      const raw = await this.systemView.get(`disabling/${key}`);
      // A mark names the node at work (earlier versions wrote none): one that is alive is still working on it.
      const owner = raw?.toString('utf8') ?? '';
      if (owner && (await this.cluster.alive(owner))) continue;
      this.logger.warn({ mount: decodeURIComponent(key) }, 'a disable or remount of this mount was interrupted; run it again');
      await this.systemView.transaction([{ type: 'delete', key: `disabling/${key}` }], [{ key: `disabling/${key}`, expected: raw }], [fenceWrite(this.cluster)]);
    }
  }

  /** Mounts this node is disabling or moving: their requests are refused from the moment the disable starts. */
  readonly #disabling = new Set<string>();
  /** Mounts being disabled or moved as the store's marks say (by any node), as of the last change followed. */
  #disablingAnywhere = new Set<string>();

  /** Reads the marks again, as another node (or this one) may have changed them. */
  async follow(): Promise<void> {
    this.#disablingAnywhere = new Set((await this.systemView.list('disabling/')).map((key) => decodeURIComponent(key)));
  }

  /** Whether a mount's requests are refused because it is being disabled or moved, here or on another node. */
  refuses(mountPath: string): boolean {
    return this.#disabling.has(mountPath) || this.#disablingAnywhere.has(mountPath);
  }

  #disablingKey(mountPath: string): string {
    return `disabling/${encodeURIComponent(mountPath)}`;
  }

  /** A guard for writes that attach something to a mount (a lease, a login token): it holds while the mount is not being disabled. */
  notDisabling(mountPath: string): StorageCondition {
    return { key: `${this.systemView.prefix}${this.#disablingKey(mountPath)}`, expected: undefined };
  }
}
