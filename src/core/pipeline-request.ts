import { randomBase62 } from './ids.ts';
import type { BackendRequest, CallerInfo, MountInfo, Operation, SecretResponse } from './framework.ts';
import type { Mounted } from './mounted.ts';
import type { PreparedWrite, StorageView } from './storage/view.ts';

/** How a request's lease is stored by the engine before it answers (see BackendRequest). */
export interface LeaseHooks {
  register(secret: SecretResponse, alongside?: PreparedWrite[]): Promise<void>;
  write(secret: SecretResponse): PreparedWrite;
}

/**
 * What a backend handler receives. A class rather than a literal per request: the lazily made lease id is a
 * prototype getter instead of an accessor defined on every request object.
 */
export class PipelineRequest implements BackendRequest {
  operation: Operation;
  readonly requestId: string;
  readonly path: string;
  readonly params: Record<string, string>;
  readonly data: Record<string, unknown>;
  readonly storage: StorageView;
  readonly caller: CallerInfo | undefined;
  readonly mount: MountInfo;
  readonly remoteAddress: string;
  readonly #input: Record<string, unknown>;
  readonly #sentAs: ReadonlyMap<string, string>;
  readonly #fullPath: string;
  #leaseId: string | undefined;
  readonly registerLease: LeaseHooks['register'];
  readonly leaseWrite: LeaseHooks['write'];
  readonly #disconnected: (() => AbortSignal) | undefined;

  constructor(operation: Operation, requestId: string, path: string, params: Record<string, string>, data: Record<string, unknown>,
    input: Record<string, unknown>, sentAs: ReadonlyMap<string, string>, mounted: Mounted, caller: CallerInfo | undefined, remoteAddress: string,
    fullPath: string, leases: LeaseHooks, disconnected: (() => AbortSignal) | undefined) {
    this.operation = operation;
    this.requestId = requestId;
    this.path = path;
    this.params = params;
    this.data = data;
    this.storage = mounted.storage;
    this.caller = caller;
    this.mount = mounted.info;
    this.remoteAddress = remoteAddress;
    this.#input = input;
    this.#sentAs = sentAs;
    this.#fullPath = fullPath;
    this.registerLease = leases.register;
    this.leaseWrite = leases.write;
    this.#disconnected = disconnected;
  }

  /** Made on first use: most requests never ask, and watching the connection costs a listener. */
  disconnected(): AbortSignal | undefined {
    return this.#disconnected?.();
  }

  /** An own property, not a method: handlers pass `req.has` around detached. */
  readonly has = (name: string): boolean => Object.hasOwn(this.#input, name);

  readonly sentAs = (name: string): string | undefined => this.#sentAs.get(name) ?? (this.has(name) ? name : undefined);

  /** The lease id a secret in this response will receive. */
  get leaseId(): string {
    return (this.#leaseId ??= `${this.#fullPath}/${randomBase62(24)}`.replace(/\/+/g, '/'));
  }
}
