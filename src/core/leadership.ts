import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import type { DisableMarks } from './disable-marks.ts';
import type { Backend } from './framework.ts';
import type { LeaseManager } from './leases.ts';
import type { Mounted } from './mounted.ts';

/**
 * The work that runs on the leader only: the lease expiry, the clearing of interrupted disables, and each mount's
 * leader work and periodic job, started when this node takes over (or a mount appears while it leads) and stopped,
 * awaited, when it steps down (or the mount goes).
 */
export class Leadership {
  declare readonly clock: Clock;
  declare readonly logger: Logger;
  declare readonly leases: Pick<LeaseManager, 'start' | 'stop'>;
  declare readonly marks: Pick<DisableMarks, 'clearInterruptedDisables'>;
  /** The backends running here (the mount life cycle's, read only). */
  readonly #mounted: ReadonlyMap<string, Mounted>;

  constructor(deps: Pick<Leadership, 'clock' | 'logger' | 'leases' | 'marks'> & { mounted: ReadonlyMap<string, Mounted> }) {
    const { mounted, ...rest } = deps;
    Object.assign(this, rest);
    this.#mounted = mounted;
  }

  async startLeaderWork(mounted: Mounted): Promise<void> {
    if (mounted.leading) return;
    mounted.leading = true;
    try {
      await mounted.backend.leader?.start();
    } catch (err) {
      this.logger.error({ err, mount: mounted.entry.path }, 'starting the background work of a mount failed');
    }
    const { periodic } = mounted.backend;
    if (periodic) mounted.stopPeriodic = this.#schedulePeriodic(mounted.entry.path, periodic, this.logger);
  }

  async stopLeaderWork(mounted: Mounted): Promise<void> {
    if (!mounted.leading) return;
    mounted.leading = false;
    mounted.stopPeriodic?.();
    mounted.stopPeriodic = undefined;
    await mounted.backend.leader?.stop();
  }

  /** This node took over: the lease expiry, the marks of interrupted disables, every mount's background work. */
  async lead(): Promise<void> {
    await this.marks.clearInterruptedDisables();
    await this.leases.start();
    for (const mounted of [...this.#mounted.values()]) await this.startLeaderWork(mounted);
  }

  async stepDown(): Promise<void> {
    this.leases.stop();
    for (const mounted of [...this.#mounted.values()]) await this.stopLeaderWork(mounted);
  }

  /** Re-arms after each run completes, so a slow run delays the next one instead of overlapping it. */
  #schedulePeriodic(path: string, job: NonNullable<Backend['periodic']>, logger: Logger): () => void {
    let cancel = () => {};
    let stopped = false;
    const arm = () => {
      cancel = this.clock.setTimer(job.intervalMs, () => {
        void job.run().catch((err) => logger.error({ err, mount: path }, 'periodic job failed')).finally(() => { if (!stopped) arm(); });
      });
    };
    arm();
    return () => {
      stopped = true;
      cancel();
    };
  }
}
