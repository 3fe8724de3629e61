/** The state every part of one mount of the LDAP engine shares, and the shape of a part. */
import type { Clock } from '../../core/clock.ts';
import type { BackendContext, PathDefinition, SecretType } from '../../core/framework.ts';
import type { KeyedLock } from '../../core/keyed-lock.ts';
import type { StorageView } from '../../core/storage/view.ts';
import type { LdapClient, LdapConnectionConfig } from '../../providers/ldap/client.ts';
import type { ManagedAccounts } from './accounts.ts';
import type { LdapConnections } from './connections.ts';
import type { RotationScheduler } from './scheduler.ts';

/** What one part of the engine (a path file) contributes to the backend. */
export interface LdapEnginePart {
  paths: PathDefinition[];
  secrets?: SecretType[];
  /** On every node at mount and start: storage-only preparation any node may repeat. */
  initialize?(): Promise<void>;
  /** On the cluster's leader, when it takes over (or at mount on it): finishing interrupted work, scheduling. */
  lead?(): Promise<void>;
  /** When this node stops leading (and at cleanup): stops what lead started and waits for it. */
  stepDown?(): Promise<void>;
  cleanup?(): Promise<void>;
}

/** Something that must not outlive the config; DELETE config is refused while any exists. */
export interface ConfigDependent {
  /** Plural noun for the message, e.g. "static roles". */
  what: string;
  /** Names of the objects that still need the config (empty when none). */
  names(): Promise<string[]>;
  /** What the operator does to them first; "delete" unless said. */
  remedy?: 'delete' | 'revoke';
}

export interface LdapEngineOptions {
  createClient: (config: LdapConnectionConfig) => LdapClient;
  /** Parallel directory password changes run by the scheduler. */
  rotationConcurrency: number;
  /** Retry delays after a failed scheduled rotation: base * 2^(n-1), capped, with jitter. */
  retryBaseMs: number;
  retryMaxMs: number;
  /** Check-outs that may wait on one library set at once, across the cluster. */
  libraryMaxWaiters: number;
}

/** State shared by every part of one mount of the engine. */
export interface LdapEngine {
  ctx: BackendContext;
  storage: StorageView;
  clock: Clock;
  options: LdapEngineOptions;
  connections: LdapConnections;
  accounts: ManagedAccounts;
  /** Per-name locks for read-modify-write of roles and sets; keys are namespaced (`static-role/<name>`). */
  locks: KeyedLock;
  scheduler: RotationScheduler;
  /** Registered by parts whose objects need the config (static roles, dynamic roles, library sets). */
  configDependents: ConfigDependent[];
  /**
   * Registered by parts whose leader work follows the config (automated root rotation, drift verification): run after
   * a config write or delete on this node, and on a shared store by the leader's periodic refresh (a write elsewhere).
   */
  configWatchers: Array<() => Promise<void>>;
  /** Check-outs waiting on a library set, for its gauge: the library part sets it (its queue may live in memory). */
  libraryWaiters(set: string): Promise<number>;
}
