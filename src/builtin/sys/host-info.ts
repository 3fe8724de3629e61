import { statfs } from 'node:fs/promises';
import os from 'node:os';
import type { Core } from '../../core/core.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';

/** statfs(2) magic numbers of the file systems a server usually runs on; others report "" as Vault does where it cannot tell. */
const FS_TYPES: Record<number, string> = { 0xef53: 'ext4', 0x58465342: 'xfs', 0x9123683e: 'btrfs', 0x01021994: 'tmpfs', 0x794c7630: 'overlay' };

const percent = (part: number, whole: number) => (whole > 0 ? (part / whole) * 100 : 0);

/** Usage of the root file system, in the fields of Vault's (gopsutil's) disk usage. */
async function rootDisk(): Promise<Record<string, unknown>> {
  const s = await statfs('/');
  const total = s.blocks * s.bsize;
  const free = s.bavail * s.bsize;
  const used = (s.blocks - s.bfree) * s.bsize;
  return {
    path: '/', fstype: FS_TYPES[s.type] ?? '', total, free, used, usedPercent: percent(used, used + free),
    inodesTotal: s.files, inodesUsed: s.files - s.ffree, inodesFree: s.ffree, inodesUsedPercent: percent(s.files - s.ffree, s.files),
  };
}

/**
 * sys/host-info in Vault's shape (its fields come from gopsutil): what Node's `os` reports fills them, and what it
 * cannot know (CPU family and flags, process count, virtualisation) is left empty or zero rather than guessed.
 */
export function hostInfoPaths(core: Core): PathDefinition[] {
  return [
    definePath({
      pattern: 'host-info',
      description: 'CPU, CPU times, root disk usage, host and memory statistics of the host this server runs on.',
      operations: {
        read: async () => {
          const cpus = os.cpus();
          const now = core.clock.now();
          const uptime = Math.floor(os.uptime());
          const total = os.totalmem();
          const available = os.freemem();
          return {
            data: {
              cpu: cpus.map((c, i) => ({
                cpu: i, vendorId: '', family: '', model: '', stepping: 0, physicalId: '', coreId: String(i), cores: 1,
                modelName: c.model, mhz: c.speed, cacheSize: 0, flags: [], microcode: '',
              })),
              // Node counts milliseconds; gopsutil reports seconds.
              cpu_times: cpus.map((c, i) => ({
                cpu: `cpu${i}`, user: c.times.user / 1000, system: c.times.sys / 1000, idle: c.times.idle / 1000, nice: c.times.nice / 1000,
                iowait: 0, irq: c.times.irq / 1000, softirq: 0, steal: 0, guest: 0, guestNice: 0,
              })),
              disk: [await rootDisk()],
              host: {
                hostname: os.hostname(), uptime, bootTime: Math.floor(now / 1000) - uptime, procs: 0, os: process.platform,
                platform: '', platformFamily: '', platformVersion: '', kernelVersion: os.release(), kernelArch: os.machine(),
                virtualizationSystem: '', virtualizationRole: '', hostid: '',
              },
              memory: { total, available, used: total - available, usedPercent: percent(total - available, total), free: available },
              timestamp: new Date(now).toISOString(),
            },
          };
        },
      },
    }),
  ];
}
