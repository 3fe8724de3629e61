// Fault injection and the request log. Faults match on service, method and path and fire a
// bounded number of times, either instead of the handler ("before") or after it ran ("after": the
// write happened but the caller sees an error, the outcome-unknown case that idempotency must survive).
import type { EmulatorState } from './state.ts';
import type { ServiceName } from './http.ts';

export interface FaultRule {
  service?: ServiceName;
  method?: string;
  /** A RegExp, or a substring of the request path. */
  path: RegExp | string;
  status: number;
  /** How many matching requests fail; then the rule is spent. */
  count: number;
  retryAfterSeconds?: number;
  code?: string;
  message?: string;
  when?: 'before' | 'after';
}

export interface ActiveFault extends FaultRule {
  remaining: number;
  fired: number;
}

export interface FaultTarget {
  service?: ServiceName;
  method?: string;
  path: RegExp | string;
}

function matches(rule: FaultTarget, service: ServiceName, method: string, path: string): boolean {
  if (rule.service && rule.service !== service) return false;
  if (rule.method && rule.method.toUpperCase() !== method) return false;
  return typeof rule.path === 'string' ? path.includes(rule.path) : rule.path.test(path);
}

export class Faults {
  readonly #state: EmulatorState;
  readonly active: ActiveFault[] = [];

  constructor(state: EmulatorState) {
    this.#state = state;
  }

  inject(rule: FaultRule): ActiveFault {
    const fault: ActiveFault = { ...rule, remaining: rule.count, fired: 0 };
    this.active.push(fault);
    return fault;
  }

  /** N× 429 with Retry-After, as Graph and ARM throttle. */
  throttle(target: FaultTarget, count: number, retryAfterSeconds = 1): ActiveFault {
    return this.inject({ ...target, status: 429, count, retryAfterSeconds, code: 'TooManyRequests', message: 'Too many requests, retry later.' });
  }

  /** N× 5xx before (or, with when: 'after', after) the handler ran. */
  fail(target: FaultTarget & { when?: 'before' | 'after' }, count: number, status = 503): ActiveFault {
    return this.inject({ ...target, status, count });
  }

  /** Delays applied to principals created from now on. */
  replicationDelay(delays: Partial<EmulatorState['replication']>): void {
    Object.assign(this.#state.replication, delays);
  }

  clear(): void {
    this.active.length = 0;
    this.replicationDelay({ applicationToServicePrincipal: 0, servicePrincipalToArm: 0, servicePrincipalToGroups: 0, passwordToToken: 0 });
  }

  take(when: 'before' | 'after', service: ServiceName, method: string, path: string): ActiveFault | undefined {
    const fault = this.active.find((f) => f.remaining > 0 && (f.when ?? 'before') === when && matches(f, service, method, path));
    if (fault) {
      fault.remaining -= 1;
      fault.fired += 1;
    }
    return fault;
  }
}

export interface LogEntry {
  at: number;
  service: ServiceName;
  method: string;
  path: string;
  query: string;
  status: number;
  /** appId of the caller, when its token or client credential was recognised. */
  appId?: string;
  oid?: string;
  faulted: boolean;
}

export interface LogFilter extends Partial<FaultTarget> {
  appId?: string;
  status?: number;
}

export class RequestLog {
  readonly entries: LogEntry[] = [];

  record(entry: LogEntry): void {
    this.entries.push(entry);
  }

  filter(f: LogFilter = {}): LogEntry[] {
    return this.entries.filter(
      (e) =>
        (f.path === undefined || matches({ service: f.service, method: f.method, path: f.path }, e.service, e.method, e.path)) &&
        (f.service === undefined || f.service === e.service) &&
        (f.method === undefined || f.method.toUpperCase() === e.method) &&
        (f.appId === undefined || f.appId === e.appId) &&
        (f.status === undefined || f.status === e.status),
    );
  }

  count(f: LogFilter = {}): number {
    return this.filter(f).length;
  }

  clear(): void {
    this.entries.length = 0;
  }
}
