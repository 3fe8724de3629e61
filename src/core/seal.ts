import type { Logger } from 'pino';
import type { Barrier } from './barrier.ts';
import type { Cluster } from './cluster.ts';
import { KeyedLock } from './keyed-lock.ts';
import type { LeaseManager } from './leases.ts';
import type { MountLifecycle } from './mount-lifecycle.ts';
import type { Mounted } from './mounted.ts';
import type { PolicyStore } from './policy-store.ts';
import type { TokenStore } from './tokens.ts';

/** Sealing and unsealing a running node (sys/seal, sys/unseal); starting one sealed is Core.start's. */
export class Sealing {
  declare readonly barrier: Pick<Barrier, 'sealed' | 'seal' | 'unseal'>;
  declare readonly cluster: Pick<Cluster, 'start' | 'stop'>;
  declare readonly leases: Pick<LeaseManager, 'idle'>;
  declare readonly policies: Pick<PolicyStore, 'invalidate'>;
  declare readonly tokens: Pick<TokenStore, 'forget'>;
  declare readonly mountTable: Pick<MountLifecycle, 'follow'>;
  declare readonly logger: Logger;
  /** The backends running here (the mount life cycle's, read only). */
  readonly #mounted: ReadonlyMap<string, Mounted>;

  constructor(deps: Pick<Sealing, 'barrier' | 'cluster' | 'leases' | 'policies' | 'tokens' | 'mountTable' | 'logger'> & { mounted: ReadonlyMap<string, Mounted> }) {
    const { mounted, ...rest } = deps;
    Object.assign(this, rest);
    this.#mounted = mounted;
  }

  /** Seals and unseals one at a time; the node counts as sealed while either runs. */
  readonly #sealChanges = new KeyedLock();
  #sealChanging = false;

  get sealed(): boolean {
    return this.#sealChanging || this.barrier.sealed;
  }

  /**
   * sys/seal: new requests are refused at once (503) except the status and unseal paths; this node stops leading (its
   * background work ends, on a cluster another node takes over) and leaves the cluster; caches are dropped and the
   * barrier forgets its keys. Audit devices stay open, so what a sealed node answers is still recorded.
   */
  async seal(): Promise<void> {
    await this.#sealChanges.run('', async () => {
      if (this.barrier.sealed) return;
      this.#sealChanging = true;
      try {
        await this.cluster.stop();
        await this.leases.idle();
        for (const mounted of this.#mounted.values()) mounted.backend.cached?.invalidate();
        this.policies.invalidate();
        this.tokens.forget();
        this.barrier.seal();
      } finally {
        this.#sealChanging = false;
      }
      this.logger.warn('the node is sealed: it serves nothing but sys/seal-status, sys/health and sys/unseal until unsealed');
    });
  }

  /** sys/unseal: the unseal key opens the barrier again (UnsealError when it does not), then the node rejoins as at start. */
  async unseal(unsealKey: Buffer): Promise<void> {
    await this.#sealChanges.run('', async () => {
      if (!this.barrier.sealed) return;
      this.#sealChanging = true;
      try {
        await this.barrier.unseal(unsealKey);
        try {
          await this.mountTable.follow();
          await this.cluster.start();
        } catch (err) {
          // Half unsealed is not served: the node stays sealed, and the operator sees why and tries again.
          await this.cluster.stop();
          this.barrier.seal();
          throw err;
        }
      } finally {
        this.#sealChanging = false;
      }
      this.logger.info('the node is unsealed');
    });
  }
}
