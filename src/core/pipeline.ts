import type { Logger } from 'pino';
import { addressInCidrs } from '../lib/cidr.ts';
import type { AuditBroker } from './audit/broker.ts';
import { AuditRecord } from './audit/entry.ts';
import { UnsealError } from './barrier.ts';
import type { Clock } from './clock.ts';
import type { DisableMarks } from './disable-marks.ts';
import { BadRequestError, NotFoundError, PermissionDeniedError, SealedError, StrongroomError, UnsupportedOperationError } from './errors.ts';
import { foldAliases, parameterSpelling, parameterView } from './field-aliases.ts';
import { validateFields } from './fields.ts';
import type { BackendResponse, CallerInfo, Operation, SecretResponse } from './framework.ts';
import { newRequestId } from './ids.ts';
import { minPositive, type LeaseManager, type NewLease } from './leases.ts';
import type { Login } from './login.ts';
import type { CoreTelemetry } from './metrics.ts';
import type { MountLifecycle } from './mount-lifecycle.ts';
import type { Mounted } from './mounted.ts';
import type { MountTable } from './mounts.ts';
import { pathHelp, wantsHelp } from './path-help.ts';
import { PipelineRequest, type LeaseHooks } from './pipeline-request.ts';
import type { PolicyStore } from './policy-store.ts';
import type { CoreRequest, CoreResponse, ServedRequest } from './request.ts';
import { isRootProtected, pathProblem } from './router.ts';
import type { Sealing } from './seal.ts';
import { withoutSentValues } from './sent-values.ts';
import { GuardError } from './storage/view.ts';
import type { TokenEntry, TokenStore } from './tokens.ts';
import { VERSION } from './version.ts';
import { requestedWrapTtl, wrappedEnvelope, type ResponseWrapper } from './wrapping.ts';

/** Operations that need the `update` capability on a path without an existence check. */
const WRITE_OPS = new Set<Operation>(['create', 'update']);
const UNAUTHENTICATED_SYS = new Set(['sys/health', 'sys/seal-status']);
/** What a sealed node still answers (as Vault's does): its status, and the way to unseal it. */
const SEALED_SYS = new Set(['sys/health', 'sys/seal-status', 'sys/unseal']);

/**
 * The request pipeline: a request's path canonicalised, its mount found, its token checked (network binding, uses)
 * and the ACL asked; then the handler, the lease or login token its answer carries, response wrapping, the audit
 * entries around it all, and errors rendered as Vault's envelope.
 */
export class Pipeline {
  declare readonly options: { maxLeaseTtl: number; telemetry?: CoreTelemetry };
  declare readonly clock: Clock;
  declare readonly logger: Logger;
  declare readonly audit: Pick<AuditBroker, 'enabled' | 'logRequest' | 'logResponse'>;
  declare readonly sealing: Pick<Sealing, 'sealed'>;
  declare readonly mounts: Pick<MountTable, 'match'>;
  declare readonly marks: Pick<DisableMarks, 'refuses'>;
  declare readonly mountTable: Pick<MountLifecycle, 'effectiveTtls' | 'serving'>;
  declare readonly tokens: Pick<TokenStore, 'lookup'>;
  declare readonly policies: Pick<PolicyStore, 'aclFor' | 'builtAcl'>;
  declare readonly leases: Pick<LeaseManager, 'register' | 'prepare' | 'forget'>;
  declare readonly login: Pick<Login, 'login' | 'useOnce'>;
  declare readonly wrapping: Pick<ResponseWrapper, 'wrap'>;
  constructor(deps: Pick<Pipeline, 'options' | 'clock' | 'logger' | 'audit' | 'sealing' | 'mounts' | 'marks' | 'mountTable' | 'tokens' | 'policies' | 'leases' | 'login' | 'wrapping'>) {
    Object.assign(this, deps);
  }

  async handle(req: CoreRequest): Promise<CoreResponse> {
    const started = performance.now();
    const served: ServedRequest = { id: newRequestId(), mount: undefined, operation: undefined, login: false };
    const res = await this.#answer(req, served);
    res.served = served;
    this.options.telemetry?.request(served, res.status, started);
    return res;
  }

  async #answer(req: CoreRequest, served: ServedRequest): Promise<CoreResponse> {
    const requestId = served.id;
    // Without audit devices this boolean is all auditing costs a request.
    const audit = this.audit.enabled ? new AuditRecord(req, requestId) : undefined;
    try {
      const res = await this.#handle(req, requestId, audit, served);
      return audit ? await this.audit.logResponse(audit, res) : res;
    } catch (err) {
      const res = this.#errorResponse(err, requestId, req);
      return audit ? await this.audit.logResponse(audit, res) : res;
    }
  }

  async #handle(req: CoreRequest, requestId: string, audit: AuditRecord | undefined, served: ServedRequest): Promise<CoreResponse> {
    const problem = pathProblem(req.path);
    if (problem) throw new BadRequestError(problem);
    let operation = operationFor(req);
    served.operation = operation;
    let path = req.path;
    if (operation === 'list' && !path.endsWith('/')) path += '/';
    if (this.sealing.sealed && !SEALED_SYS.has(path)) throw new SealedError();
    const wrapTtl = requestedWrapTtl(req.wrapTtl, this.options.maxLeaseTtl);

    const entry = this.mounts.match(path);
    served.mount = entry?.path;
    if (entry && this.marks.refuses(entry.path)) throw new StrongroomError(503, `the mount "${entry.path}" is being disabled or moved`);
    const serving = entry && this.mountTable.serving(entry);
    // A backend that failed to start (its 503) is told only to a caller the ACL lets reach the path, like a 404.
    let unavailable: unknown;
    const mounted = serving instanceof Promise ? await serving.catch((err: unknown) => void (unavailable = err)) : serving;
    let relative = entry ? path.slice(entry.path.length) : path;
    let match = mounted?.table.match(relative);
    // Canonical before authorised: from here on the ACL, the lease id and the handler see one spelling.
    if (match && match.def.canonical) {
      ({ path: relative, match } = mounted!.table.canonicalise(relative, match));
      path = entry!.path + relative;
    }

    const input: Record<string, unknown> = operation === 'update' || operation === 'create' || operation === 'patch' ? { ...(req.body ?? {}) } : { ...flattenQuery(req.query) };
    if (operation !== 'read' && operation !== 'list' && req.body) Object.assign(input, req.body);
    // Only when sent: a delete turns the object into a slower dictionary for everything after.
    if ('list' in input) delete input.list;
    // Vault's request framework treats a JSON null as a field that was not sent (hvac sends nulls for unset options).
    for (const k in input) if (input[k] === null) delete input[k];

    const unauthenticated = (match?.def.unauthenticated ?? false) || UNAUTHENTICATED_SYS.has(path);
    served.login = entry?.class === 'auth' && (match?.def.unauthenticated ?? false);
    const presented = req.token && !this.sealing.sealed ? await this.tokens.lookup(req.token) : undefined;
    // A token bound to networks is refused outside them on every use, not only where it was issued.
    const usable = presented && (presented.boundCidrs.length === 0 || addressInCidrs(req.remoteAddress, presented.boundCidrs)) ? presented : undefined;
    // On an unauthenticated path a token still says who asks (sys/internal/ui/mounts answers by its policies): the
    // ACL does not judge the request, no use is counted, and an unusable token is as good as none.
    const caller: CallerInfo | undefined = usable && { clientToken: req.token!, accessor: usable.accessor, entityId: usable.entityId, displayName: usable.displayName, policies: usable.policies };
    audit?.identify(path, operation, entry, input, usable, match?.def.fields, match?.def.secretResponseKeys);
    let token: TokenEntry | undefined;
    if (!unauthenticated) {
      if (!usable) throw new PermissionDeniedError();
      token = usable;
    }
    const acl = token ? this.policies.builtAcl(token.policies) ?? (await this.policies.aclFor(token.policies)) : undefined;

    if (!mounted || !match) {
      if (acl && !acl.allowOperation(path, operation === 'list' ? 'list' : operation === 'read' ? 'read' : 'update', undefined).allowed) throw new PermissionDeniedError();
      if (unavailable) throw unavailable;
      throw new NotFoundError(mounted ? 'unsupported path' : `no handler for route "${path}". route entry not found.`);
    }
    if (operation === 'read' && wantsHelp(req.query)) {
      // As in Vault: any capability on the path (not only read) lets a token see its help.
      if (acl && acl.capabilities(path).every((c) => c === 'deny')) throw new PermissionDeniedError();
      return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(await pathHelp(mounted.entry.path, relative, match.def, VERSION)) };
    }

    const validated = validateFields(match.def.fields ?? {}, input);
    const { errors } = validated;
    // One name per effect: aliases become their field before the ACL, the existence check and the handler see them.
    const folded = foldAliases(match.def.fields, input, validated.values);
    const { sentAs } = folded;
    const values = match.def.freeForm ? { ...input, ...folded.values } : folded.values;
    let stored: { ttl: number; renewable: boolean } | undefined;
    const lease = (secret: SecretResponse): NewLease => {
      if (stored) throw new Error('a request can store only one lease');
      return this.#secretLease(secret, mounted, backendReq.leaseId, token);
    };
    const leaseHooks: LeaseHooks = {
      register: async (secret, alongside) => {
        const entry = lease(secret);
        await this.leases.register(entry, alongside);
        stored = entry;
      },
      write: (secret) => {
        const entry = lease(secret);
        const { write } = this.leases.prepare(entry);
        return { ops: write.ops, committed: () => {
          stored = entry;
          write.committed();
        } };
      },
    };
    const backendReq = new PipelineRequest(operation, requestId, relative, match.params, values, input, sentAs, mounted, caller, req.remoteAddress, path, leaseHooks, req.disconnected);

    if (operation === 'update' && match.def.existenceCheck && errors.length === 0) {
      if (!(await match.def.existenceCheck(backendReq))) operation = 'create';
      backendReq.operation = operation;
      served.operation = operation;
    }
    if (acl) {
      const decision = acl.allowOperation(path, operation, parameterView(input, values, match.def.fields), {
        rootProtected: isRootProtected(path),
        wrapTtl,
        parameters: match.def.fields && parameterSpelling(match.def.fields),
      });
      if (!decision.allowed) throw new PermissionDeniedError();
    }
    const handler = match.def.operations[operation] ?? (WRITE_OPS.has(operation) ? match.def.operations[operation === 'create' ? 'update' : 'create'] : undefined);
    if (!handler) throw new UnsupportedOperationError();
    if (errors.length) throw new BadRequestError(errors);
    if (wrapTtl === undefined && match.def.requiresWrapping) throw new BadRequestError('this endpoint requires response wrapping: send the X-Vault-Wrap-TTL header');
    if (wrapTtl !== undefined && match.def.rawResponse) throw new BadRequestError('this endpoint\'s answer cannot be wrapped: send it without the X-Vault-Wrap-TTL header');

    if (audit) {
      audit.operation = operation;
      await this.audit.logRequest(audit);
    }
    if (token && token.numUses > 0) await this.login.useOnce(token);
    let response: BackendResponse | undefined;
    try {
      response = (await handler(backendReq)) ?? undefined;
      if (stored && !response?.secret) throw new Error('the handler stored a lease but answered without its secret');
    } catch (err) {
      if (stored) await this.leases.forget(backendReq.leaseId);
      throw err;
    }
    const warnings = [...(response?.warnings ?? [])];
    const fields = match.def.fields ?? {};
    const ignored = match.def.freeForm ? [] : Object.keys(input).filter((k) => !Object.hasOwn(fields, k) && !Object.hasOwn(match.params, k)).sort();
    if (ignored.length) warnings.push(ignoredWarning(ignored));

    if (response?.raw) return { status: response.raw.status, headers: { 'content-type': 'application/json', ...response.raw.headers }, body: response.raw.body };

    let leaseDuration = 0;
    let renewable = false;
    let issuedLease = '';
    if (response?.secret) {
      const secret = response.secret;
      if (!stored) await leaseHooks.register(secret);
      const lease = stored!;
      // The secret is handed out either way; a record left behind is cleared by the engine's own sweep.
      await secret.registered?.().catch((err: unknown) => this.logger.warn({ mount: mounted.entry.path, err: (err as Error).message }, 'releasing the write-ahead record of an issued secret failed'));
      leaseDuration = lease.ttl;
      renewable = lease.renewable;
      issuedLease = backendReq.leaseId;
    }
    if (response?.lease) {
      issuedLease = response.lease.id;
      leaseDuration = response.lease.duration;
      renewable = response.lease.renewable;
    }
    let auth: Record<string, unknown> | null = response?.authBlock ?? null;
    if (response?.auth) auth = await this.login.login(response.auth, mounted, path);

    const data = response?.data ?? null;
    if (!response || (response.data === undefined && !response.secret && !response.auth && !response.authBlock)) {
      if (operation === 'read' || operation === 'list') throw new NotFoundError(`${operation === 'list' ? 'no entries' : 'no value'} found at "${path}"`);
      if (warnings.length === 0) return { status: response?.status ?? 204, headers: {}, body: undefined };
    }
    if (operation === 'list') {
      const keys = (data as { keys?: unknown } | null)?.keys;
      if (!Array.isArray(keys) || keys.length === 0) throw new NotFoundError(`no entries found at "${path}"`);
    }
    const envelope: Record<string, unknown> = {
      request_id: requestId, lease_id: issuedLease, renewable, lease_duration: leaseDuration, data,
      wrap_info: null, warnings: warnings.length ? warnings : null, auth, mount_type: mounted.entry.type,
    };
    // Vault repeats these sys answers' data at the top level (older clients read it there); envelope keys win.
    if (data && injectsData(path)) for (const [k, v] of Object.entries(data)) if (!Object.hasOwn(envelope, k)) envelope[k] = v;
    if (wrapTtl !== undefined) return this.#wrapped(envelope, { ttl: wrapTtl, creationPath: path, wrappedAccessor: auth?.accessor as string | undefined }, audit);
    if (audit) audit.envelope = envelope;
    return { status: response?.status ?? 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(envelope) };
  }

  /**
   * The answer kept behind a wrapping token and the client told only how to unwrap it. Its lease and token were
   * issued as for any answer; the audit entry records the answer (hashed, as always) with the wrap_info.
   */
  async #wrapped(envelope: Record<string, unknown>, opts: { ttl: number; creationPath: string; wrappedAccessor?: string }, audit: AuditRecord | undefined): Promise<CoreResponse> {
    const wrapInfo = await this.wrapping.wrap(JSON.stringify(envelope), opts);
    if (audit) audit.envelope = { ...envelope, wrap_info: wrapInfo };
    return { status: 200, headers: { 'content-type': 'application/json' }, body: JSON.stringify(wrappedEnvelope(wrapInfo)) };
  }

  /** A secret's lease, its TTL clamped by the engine's cap, the mount and the system. */
  #secretLease(secret: SecretResponse, mounted: Mounted, id: string, token: TokenEntry | undefined): NewLease {
    const ttls = this.mountTable.effectiveTtls(mounted.entry);
    const max = minPositive(ttls.max, secret.maxTtl ?? 0);
    let ttl = secret.ttl > 0 ? secret.ttl : ttls.default;
    ttl = max > 0 ? Math.min(ttl, max) : ttl;
    const now = this.clock.now();
    return {
      id, kind: 'secret', mountPath: mounted.entry.path, secretType: secret.type, internal: secret.internal,
      issueTime: now, expireTime: now + ttl * 1000, ttl, maxTtl: secret.maxTtl ?? 0, renewable: secret.renewable ?? true, tokenSalted: token?.salted ?? '',
    };
  }

  #errorResponse(err: unknown, requestId: string, req: CoreRequest): CoreResponse {
    // A token revoked or a mount disabled while the request ran: what it was about to store was refused.
    if (err instanceof GuardError) err = new PermissionDeniedError();
    // The node was sealed while the request ran.
    if (err instanceof UnsealError && this.sealing.sealed) err = new SealedError();
    if (err instanceof StrongroomError) {
      return { status: err.status, headers: { ...err.headers, 'content-type': 'application/json' }, body: JSON.stringify({ errors: withoutSentValues(err.messages, req.body, req.query) }) };
    }
    this.logger.error({ err, request_id: requestId, path: req.path }, 'internal error');
    return { status: 500, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ errors: [`internal error (request ${requestId})`] }) };
  }
}

function operationFor(req: CoreRequest): Operation {
  const method = req.method.toUpperCase();
  const list = req.query.list;
  switch (method) {
    case 'GET':
    case 'HEAD':
      if (list !== undefined) {
        const v = Array.isArray(list) ? list[0] : list;
        if (['1', 't', 'T', 'TRUE', 'true', 'True'].includes(v)) return 'list';
        if (!['0', 'f', 'F', 'FALSE', 'false', 'False'].includes(v)) throw new BadRequestError('invalid value for query parameter "list": expected a boolean');
      }
      return 'read';
    case 'LIST':
      return 'list';
    case 'POST':
    case 'PUT':
      return 'update';
    case 'DELETE':
      return 'delete';
    case 'PATCH':
      return 'patch';
    default:
      throw new StrongroomError(405, `unsupported HTTP method ${method}`);
  }
}

/**
 * Vault's warning for unknown body fields. The names are the client's own, so the echo is bounded: a request with
 * thousands of keys, or one very long key, gets a short warning.
 */
function ignoredWarning(names: string[]): string {
  const MAX_NAMES = 20;
  const MAX_NAME = 64;
  const shown = names.slice(0, MAX_NAMES).map((n) => (n.length > MAX_NAME ? `${n.slice(0, MAX_NAME)}…` : n));
  const more = names.length > MAX_NAMES ? ` (and ${names.length - MAX_NAMES} more)` : '';
  return `Endpoint ignored these unrecognized parameters: [${shown.join(' ')}]${more}`;
}

function flattenQuery(query: Record<string, string | string[]>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(query).filter(([k]) => k !== 'help'));
}

/** Legacy clients read sys/mounts, sys/auth, sys/audit*, sys/policy* and sys/capabilities* data from the top level. */
function injectsData(path: string): boolean {
  return /^sys\/(mounts|auth|audit|policy|policies\/acl|capabilities)/.test(path) && !/^sys\/policies\/password/.test(path);
}
