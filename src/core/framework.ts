import type { Logger } from 'pino';
import type { Clock } from './clock.ts';
import { BadRequestError } from './errors.ts';
import type { FieldValues, Fields } from './fields.ts';
import type { PreparedWrite, StorageView } from './storage/view.ts';

/**
 * The contract between the core and every engine or auth method ("backend"). A backend declares its paths;
 * the core owns routing, authentication, ACL, the envelope, leases and tokens, so every backend gets them
 * the same way.
 */
// ---- metrics a backend records ---------------------------------------------------------------------

export type Labels = Record<string, string>;

/** A metric family an engine records (src/telemetry/families.ts lists them); `labels` are those beside `mount`. */
export interface Family<L extends Labels = Record<never, string>> {
  readonly name: string;
  readonly help: string;
  readonly type: 'counter' | 'gauge' | 'histogram';
  readonly labels: ReadonlyArray<keyof L & string>;
  /** A histogram's bucket upper bounds, ascending. */
  readonly buckets?: readonly number[];
}

/** What a mount records through (BackendContext.metrics); the `mount` label is its path. */
export interface MountMetrics {
  counter<L extends Labels>(family: Family<L>): { inc(labels: L, by?: number): void };
  /** A gauge read when scraped; reading it may use storage. Replaces an earlier reader of the family for this mount. */
  gauge<L extends Labels>(family: Family<L>, read: () => Promise<Array<{ labels: L; value: number }>>): void;
  histogram<L extends Labels>(family: Family<L>): { observe(labels: L, value: number): void };
}

export type Operation = 'read' | 'list' | 'create' | 'update' | 'delete' | 'patch';

export interface CallerInfo {
  /** The caller's token as presented; handlers must never log or store it. */
  clientToken: string;
  accessor: string;
  entityId: string;
  displayName: string;
  policies: string[];
}

export interface MountInfo {
  path: string; // "ldap/" or "auth/cloud/"
  accessor: string;
  type: string;
  class: 'secret' | 'auth';
}

export interface BackendRequest<F extends Fields = Fields> {
  operation: Operation;
  requestId: string;
  /** Path below the mount, e.g. "static-role/app/db". */
  path: string;
  /** Named captures of the matched pattern. */
  params: Record<string, string>;
  /** Validated field values; unsent fields hold their default (or undefined). */
  data: FieldValues<F>;
  /** Whether the client sent the field (partial updates change only sent keys), under its name or an alias of it. */
  has(name: keyof F & string): boolean;
  /**
   * The name the client sent the field under, undefined when not sent: an alias (`Field.aliasOf`) is folded into its
   * field before the handler runs (`has` and `data` know only the field), and this keeps its spelling for messages
   * and for read views that show the old name.
   */
  sentAs(name: keyof F & string): string | undefined;
  storage: StorageView;
  caller: CallerInfo | undefined;
  mount: MountInfo;
  remoteAddress: string;
  /** The lease id a secret in this response will receive (so an engine can index it at issue time). */
  leaseId: string;
  /**
   * Stores this request's lease now, before the engine creates what it guards, so the lease is the
   * write-ahead record: if the process dies after the creation, expiry still runs the engine's revoke. The
   * response must carry the same secret (it is not stored twice). If the handler then fails, the lease is
   * forgotten: an engine undoes its own partial work before reporting a failure. `alongside` (its event) is
   * committed with it.
   */
  registerLease(secret: SecretResponse, alongside?: PreparedWrite[]): Promise<void>;
  /**
   * This request's lease as writes for the engine to commit with its own record of the secret
   * (`StorageView.transaction`'s `alongside`): the record and its lease land together or not at all. Once
   * committed it counts as registered, as with registerLease; prepared and never committed, it is nothing.
   */
  leaseWrite(secret: SecretResponse): PreparedWrite;
  /** Aborted when the client goes away before its answer (undefined where the transport cannot tell). */
  disconnected(): AbortSignal | undefined;
}

export interface SecretResponse {
  type: string;
  /** Requested TTL in seconds (0 = mount default); the core clamps it by the mount and system maxima. */
  ttl: number;
  /** An engine-level cap on the lease's whole life in seconds (0 = none). */
  maxTtl?: number;
  renewable?: boolean;
  /** Everything revoke needs, stored encrypted with the lease; never returned to clients. */
  internal: Record<string, unknown>;
  /**
   * Called once the lease is stored: from then on the lease owns what the secret made, so an engine releases
   * its write-ahead record here (not before: a crash between issue and lease would orphan the secret).
   */
  registered?: () => Promise<void>;
}

export interface AuthResponse {
  policies: string[];
  noDefaultPolicy?: boolean;
  displayName: string;
  metadata: Record<string, string>;
  ttl: number;
  maxTtl: number;
  period?: number;
  numUses?: number;
  boundCidrs?: string[];
  renewable?: boolean;
  /** Identity alias: the core keeps one entity per (mount accessor, alias name). */
  alias?: { name: string; metadata?: Record<string, string> };
  groupAliases?: string[];
  /** Backend data kept with the token (e.g. the role name) for renewals. */
  internal?: Record<string, unknown>;
}

export interface RawResponse {
  status: number;
  headers?: Record<string, string>;
  body: string | Buffer;
}

export interface BackendResponse {
  data?: Record<string, unknown> | null;
  warnings?: string[];
  secret?: SecretResponse;
  auth?: AuthResponse;
  raw?: RawResponse;
  /** A ready `auth` block (the token store's own create/renew answers). */
  authBlock?: Record<string, unknown>;
  /** Envelope lease fields for an existing lease (lease renewals). */
  lease?: { id: string; duration: number; renewable: boolean };
  /** Override of the default status (e.g. 202). */
  status?: number;
}

export type Handler<F extends Fields> = (req: BackendRequest<F>) => Promise<BackendResponse | void>;

export interface PathDefinition<F extends Fields = Fields> {
  /** Regex source (anchored by the core); named groups become `params`. */
  pattern: string;
  fields?: F;
  operations: Partial<Record<Operation, Handler<F>>>;
  /** Decides create vs update for writes (and thereby which ACL capability is needed). */
  existenceCheck?: (req: BackendRequest<F>) => Promise<boolean>;
  /** Login paths and public discovery documents are reachable without a token. */
  unauthenticated?: boolean;
  /** The content types of the raw answer (`RawResponse`) this path gives instead of the envelope, for the OpenAPI document. */
  rawResponse?: string[];
  /**
   * Names the backend normalises (lower-cased role names, trimmed policy names): each named capture's canonical
   * spelling. The core rewrites the request path with them before the ACL check, the lease id and the handler see
   * it, so a deny on a name holds for every spelling of it. A function may throw a BadRequestError to refuse a
   * spelling it cannot canonicalise.
   */
  canonical?: Record<string, (raw: string) => string>;
  /** Takes any body keys as data (sys/wrapping/wrap): none is an unknown field, and `data` holds them all. */
  freeForm?: boolean;
  /** Answers only wrapped (sys/wrapping/wrap): a request without a wrap TTL is refused before the handler. */
  requiresWrapping?: boolean;
  /**
   * Keys of the answer's data whose values are secrets under a name that does not say so (a list of accessors under
   * `keys`): an audit device hashes them whatever a mount's audit_non_hmac_response_keys says. Credential names
   * (`password`, `id`, `accessor`, `*_token`, ...) need no declaration (src/core/audit/entry.ts).
   */
  secretResponseKeys?: readonly string[];
  description: string;
}

/**
 * Role and set names are case-insensitive: their canonical spelling is lower case. Names may hold `/` (Vault's
 * hierarchical names) but not an empty segment, which would make `a//b` a second spelling of a path.
 */
export const lowerName = (raw: string): string => {
  if (raw.includes('//')) throw new BadRequestError('the request path must not contain an empty segment ("//") in a name');
  return raw.toLowerCase();
};

/** Typed helper so each path file gets field inference. */
export function definePath<F extends Fields>(def: PathDefinition<F>): PathDefinition<Fields> {
  return def as unknown as PathDefinition<Fields>;
}

export interface LeaseView {
  id: string;
  issueTime: number;
  expireTime: number;
  internal: Record<string, unknown>;
  /** TTL requested for this renewal in seconds (the increment, or the original TTL). */
  increment: number;
}

export interface SecretType {
  type: string;
  revoke(lease: LeaseView): Promise<void>;
  /** Optional: refuse (throw) or cap the renewal; return a max TTL (seconds from issue) to enforce. */
  renew?(lease: LeaseView): Promise<{ maxTtl?: number } | void>;
}

export interface TokenView {
  accessor: string;
  entityId: string;
  policies: string[];
  metadata: Record<string, string>;
  internal: Record<string, unknown>;
  issueTime: number;
}

export interface Backend {
  /** In match order: most specific first. */
  paths: PathDefinition[];
  secrets?: SecretType[];
  /** Auth methods: re-check a login on token renewal and return its current TTLs (throw to refuse). */
  renewAuth?(token: TokenView): Promise<{ ttl: number; maxTtl: number; period?: number }>;
  /**
   * Housekeeping the core runs every `intervalMs` on the injected clock while this node leads the cluster (runs never
   * overlap; errors are logged). Its writes carry `SystemView.fence()`.
   */
  periodic?: { intervalMs: number; run(): Promise<void> };
  /** Runs after mount and at start-up on every node: storage-only preparation that any node may repeat. */
  initialize?(): Promise<void>;
  /**
   * Background work that must run on one node at a time (replaying write-ahead logs, scheduling rotations): started
   * when this node leads (after `initialize`, or when it takes over) and stopped, awaited, when it steps down or the
   * mount goes. A single node always leads. Its writes carry `SystemView.fence()` (docs/ha.md).
   */
  leader?: { start(): Promise<void>; stop(): Promise<void> };
  /**
   * What the backend keeps in memory from its storage. Writes below these prefixes (relative to the mount's storage)
   * tell the other nodes of a cluster, whose `invalidate` then drops what they cached (within the coherence bound,
   * docs/ha.md). A backend that reads its storage on every use needs none.
   */
  cached?: { prefixes: string[]; invalidate(): void };
  /** Stops timers on unmount or shutdown. */
  cleanup?(): Promise<void>;
}

export interface SystemView {
  /** Effective TTLs of this mount in seconds (mount tune, else system). */
  defaultLeaseTtl(): number;
  maxLeaseTtl(): number;
  /** Generates from the named password policy, or the server default when name is empty; 400 naming a missing policy. */
  generatePassword(policyName?: string): Promise<string>;
  /**
   * The writes that end a lease without calling the engine's revoke, for committing with the engine's own record
   * of the secret's end (`StorageView.transaction`'s `alongside`); undefined when the lease does not exist.
   */
  leaseEnd(leaseId: string): Promise<PreparedWrite | undefined>;
  /** Whether a lease is stored (a write-ahead record naming one tells by this if it was ever handed out). */
  leaseExists(leaseId: string): Promise<boolean>;
  /** When a lease ends if not renewed (ms since the epoch); undefined when it does not exist. */
  leaseExpireTime(leaseId: string): Promise<number | undefined>;
  /** Ids of this mount's outstanding leases whose path starts with `prefix` (relative to the mount). */
  leaseIds(prefix: string): Promise<string[]>;
  /** Plugin identity token for workload identity federation (later issue); throws when unavailable. */
  generateIdentityToken(audience: string, ttlSeconds: number): Promise<{ token: string; ttl: number }>;
  /** Mount tune options such as identity_token_key. */
  mountOption(name: string): string | undefined;
  /**
   * The guard of a leader-only write, to commit with it (`StorageView.transaction`'s `alongside`): it holds only while
   * this node leads under the term it has now, so a former leader's write lands nowhere (a GuardError or false).
   */
  fence(): PreparedWrite;
  /**
   * The event `type` (e.g. `ldap/rotate`) with its metadata, as a write to commit with the change it reports
   * (`StorageView.transaction`'s `alongside`): the event lands exactly when the change does (docs/events.md).
   */
  event(type: string, metadata: Record<string, string>): PreparedWrite;
  /** Whether this node leads now (on a store of its own, always). */
  leading(): boolean;
  /** Whether other nodes may share the store: then nothing can be assumed idle because this node is. */
  readonly shared: boolean;
  /** Whether the node that claimed some work (by its id, `nodeId`) may still be doing it; see Cluster.alive. */
  nodeAlive(nodeId: string): Promise<boolean>;
  /** This node's id in the cluster, for claims other nodes judge with `nodeAlive`. */
  readonly nodeId: string;
  /** Wakes this mount's `onSignal` listeners on every node of a cluster (nothing on a store of its own); best effort. */
  signal(topic: string): void;
  /** Hears this mount's signals from every node, this one included, until the returned function is called. */
  onSignal(listener: (topic: string) => void): () => void;
}

export interface BackendContext {
  storage: StorageView;
  clock: Clock;
  logger: Logger;
  mount: MountInfo;
  system: SystemView;
  /** Where the backend records its own events and gauges, labelled with its mount (src/telemetry/families.ts). */
  metrics: MountMetrics;
}

export type BackendFactory = (ctx: BackendContext) => Backend | Promise<Backend>;
