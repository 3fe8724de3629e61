import type { Backend, MountInfo, SecretType } from './framework.ts';
import type { MountEntry } from './mounts.ts';
import type { PathTable } from './router.ts';
import type { StorageView } from './storage/view.ts';

/** A backend running on this node for one entry of the mount table, keyed by the entry's uuid. */
export interface Mounted {
  entry: MountEntry;
  backend: Backend;
  /** Whether the backend's leader work (and periodic job) runs here now. */
  leading: boolean;
  stopPeriodic?: () => void;
  table: PathTable;
  secrets: Map<string, SecretType>;
  info: MountInfo;
  storage: StorageView;
}
