// Starts one emulator: three HTTPS origins (login, Graph, ARM) sharing one state, so token audiences
// differ per service exactly as in Azure. Each test file starts its own instance; nothing is global.
import { randomBytes, randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { registerArmAuthorization } from './arm-authorization.ts';
import { ComputeState, registerArmCompute } from './arm-compute.ts';
import { TokenService, type VerifyClientAssertion } from './entra.ts';
import { verifyFederatedAssertion } from './federation.ts';
import { registerEntra } from './entra.ts';
import { Faults, RequestLog } from './faults.ts';
import { registerGraph } from './graph.ts';
import { json, Router, type EmulatorRequest, type EmulatorResponse, type ServiceContext, type ServiceName, type ServiceUrls } from './http.ts';
import { MANAGED_IDENTITY_PATH, registerManagedIdentity } from './managed-identity.ts';
import { ManagedIdentityTokens, registerManagedIdentityTokens } from './managed-identity-tokens.ts';
import { EmulatorState } from './state.ts';

export const TLS_CERT_ENV = 'STRONGROOM_EMULATOR_TLS_CERT';
export const TLS_KEY_ENV = 'STRONGROOM_EMULATOR_TLS_KEY';

/** A later module (compute, federation) adds its routes and behaviour through this seam. */
export type EmulatorExtension = (routers: Record<ServiceName, Router>, ctx: ServiceContext) => void;

export interface EmulatorOptions {
  /** Defaults to the paths the vitest global setup exports in STRONGROOM_EMULATOR_TLS_CERT/KEY. */
  tlsCertPath?: string;
  tlsKeyPath?: string;
  host?: string;
  ports?: Partial<Record<ServiceName, number>>;
  tenantId?: string;
  /** Rows per list page (default 100); tests use 2 or 3 so paging is exercised. */
  pageSize?: number;
  tokenLifetimeSec?: number;
  now?: () => number;
  /** Access token issuer: the emulator's own login origin (default) or https://sts.windows.net/<tenant>/. */
  issuerStyle?: 'emulator' | 'sts';
  /** Further token audiences, e.g. https://management.azure.com/ served by the ARM origin. */
  extraResources?: Array<{ uri: string; service?: ServiceName }>;
  verifyClientAssertion?: VerifyClientAssertion;
  /** Issuer of minted managed-identity tokens and the v1 discovery document (default sts). */
  managedIdentityIssuer?: 'sts' | 'emulator';
  extensions?: EmulatorExtension[];
}

export interface CloudEnvironmentJson {
  name: string;
  activeDirectoryEndpoint: string;
  resourceManagerEndpoint: string;
  microsoftGraphEndpoint: string;
}

export interface Emulator {
  /** The authority host (login origin). */
  url: string;
  graphUrl: string;
  armUrl: string;
  tenantId: string;
  state: EmulatorState;
  faults: Faults;
  requestLog: RequestLog;
  tokens: TokenService;
  /** VMs, scale sets, user-assigned identities and other identity-bearing resources. */
  compute: ComputeState;
  /** Mints workload managed-identity tokens (the cloud auth method's input). */
  miTokens: ManagedIdentityTokens;
  /** Values for IDENTITY_ENDPOINT and IDENTITY_HEADER. */
  managedIdentity: { endpoint: string; header: string };
  /** Contents for the CLOUD_ENVIRONMENT_FILEPATH file. */
  environment(name?: string): CloudEnvironmentJson;
  close(): Promise<void>;
}

const MAX_BODY = 1024 * 1024;
const FAULT_CODES: Record<number, string> = { 429: 'TooManyRequests', 500: 'InternalServerError', 502: 'BadGateway', 503: 'ServiceUnavailable', 504: 'GatewayTimeout' };

function errorFor(service: ServiceName, status: number, code: string, message: string): EmulatorResponse {
  if (service === 'login') return json(status, { error: status === 429 ? 'temporarily_unavailable' : 'server_error', error_description: `${code}: ${message}` });
  return json(status, { error: { code, message } });
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new Error('request body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export async function startEmulator(options: EmulatorOptions = {}): Promise<Emulator> {
  const certPath = options.tlsCertPath ?? process.env[TLS_CERT_ENV];
  const keyPath = options.tlsKeyPath ?? process.env[TLS_KEY_ENV];
  if (!certPath || !keyPath) throw new Error(`startEmulator needs tlsCertPath/tlsKeyPath (or ${TLS_CERT_ENV}/${TLS_KEY_ENV} from the vitest global setup)`);
  const [cert, key] = await Promise.all([readFile(certPath), readFile(keyPath)]);
  const host = options.host ?? '127.0.0.1';

  const state = new EmulatorState(options.tenantId ?? randomUUID(), options.now);
  const tokens = new TokenService(state, { lifetimeSec: options.tokenLifetimeSec, issuerStyle: options.issuerStyle });
  await tokens.rotateSigningKey();
  const faults = new Faults(state);
  const requestLog = new RequestLog();
  const routers: Record<ServiceName, Router> = { login: new Router(), graph: new Router(), arm: new Router() };

  const handle = (service: ServiceName) => async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? '/', 'https://emulator');
    // Collapse `//subscriptions/...` (an SDK quirk) the way ARM's front door tolerates it; the log keeps the raw path.
    const path = url.pathname.replace(/\/{2,}/g, '/');
    const method = (req.method ?? 'GET').toUpperCase();
    const ereq: EmulatorRequest = { service, method, path, query: url.searchParams, headers: req.headers, rawBody: '', params: {} };
    let response: EmulatorResponse;
    let faulted = false;
    try {
      ereq.rawBody = await readBody(req);
      const before = faults.take('before', service, method, path);
      if (before) {
        faulted = true;
        response = errorFor(service, before.status, before.code ?? FAULT_CODES[before.status] ?? 'UnknownError', before.message ?? 'Injected fault.');
        if (before.retryAfterSeconds !== undefined) response.headers = { 'Retry-After': String(before.retryAfterSeconds) };
      } else {
        const match = routers[service].match(method, path);
        if (match.kind === 'found') {
          ereq.params = match.params;
          response = await match.handler(ereq);
          const after = faults.take('after', service, method, path);
          if (after) {
            faulted = true;
            response = errorFor(service, after.status, after.code ?? FAULT_CODES[after.status] ?? 'UnknownError', after.message ?? 'Injected fault after the operation completed.');
          }
        } else if (match.kind === 'method-not-allowed') {
          response = errorFor(service, 405, 'Request_BadRequest', `The HTTP method '${method}' is not allowed for ${path}.`);
        } else {
          response = errorFor(service, 404, service === 'arm' ? 'InvalidResourceType' : 'Request_ResourceNotFound', `No route for ${method} ${path}.`);
        }
      }
    } catch (err) {
      response = errorFor(service, 500, 'InternalServerError', `Emulator error: ${(err as Error).message}`);
    }
    requestLog.record({
      at: state.now(), service, method, path: url.pathname, query: url.search, status: response.status,
      appId: ereq.caller?.appId, oid: ereq.caller?.oid, faulted,
    });
    const requestId = randomUUID();
    const headers: Record<string, string> = { 'request-id': requestId, 'x-ms-request-id': requestId, ...response.headers };
    if (response.body === undefined || response.status === 204) {
      res.writeHead(response.status, headers).end();
    } else {
      res.writeHead(response.status, { 'content-type': 'application/json; charset=utf-8', ...headers }).end(JSON.stringify(response.body));
    }
  };

  const servers: Server[] = [];
  const listen = async (service: ServiceName): Promise<string> => {
    const server = createServer({ cert, key }, (req, res) => void handle(service)(req, res));
    servers.push(server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(options.ports?.[service] ?? 0, host, () => resolve());
    });
    return `https://${host}:${(server.address() as AddressInfo).port}`;
  };
  const urls: ServiceUrls = { login: await listen('login'), graph: await listen('graph'), arm: await listen('arm') };
  tokens.setLoginUrl(urls.login);
  tokens.registerResource(urls.graph, 'graph');
  tokens.registerResource(urls.arm, 'arm');
  for (const r of options.extraResources ?? []) tokens.registerResource(r.uri, r.service);

  const ctx: ServiceContext = { state, tokens, faults, urls, pageSize: options.pageSize ?? 100 };
  const identityHeader = randomBytes(16).toString('hex');
  const miTokens = new ManagedIdentityTokens(ctx, options.managedIdentityIssuer);
  await miTokens.rotateSigningKey();
  const compute = new ComputeState(state);
  // Ahead of registerEntra: the v1 discovery document and JWKS are the managed-identity module's.
  registerManagedIdentityTokens(routers.login, ctx, miTokens);
  registerEntra(routers.login, ctx, options.verifyClientAssertion ?? verifyFederatedAssertion);
  registerManagedIdentity(routers.login, ctx, identityHeader);
  registerGraph(routers.graph, ctx);
  registerArmAuthorization(routers.arm, ctx);
  registerArmCompute(routers.arm, ctx, compute);
  for (const ext of options.extensions ?? []) ext(routers, ctx);

  return {
    url: urls.login,
    graphUrl: urls.graph,
    armUrl: urls.arm,
    tenantId: state.tenantId,
    state,
    faults,
    requestLog,
    tokens,
    compute,
    miTokens,
    managedIdentity: { endpoint: `${urls.login}${MANAGED_IDENTITY_PATH}`, header: identityHeader },
    environment: (name = 'StrongroomEmulator') => ({
      name,
      activeDirectoryEndpoint: urls.login,
      resourceManagerEndpoint: urls.arm,
      microsoftGraphEndpoint: urls.graph,
    }),
    close: async () => {
      await Promise.all(servers.map((s) => new Promise<void>((resolve) => {
        s.close(() => resolve());
        s.closeAllConnections();
      })));
    },
  };
}
