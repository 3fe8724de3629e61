// Entra ID: OpenID discovery, JWKS and the token endpoint (client_credentials with a secret or a
// client assertion). Access tokens are RS256 JWTs that Graph, ARM and the cloud auth method verify
// against the same keys, so a token minted here is checked exactly like one from login.microsoftonline.com.
import { randomUUID } from 'node:crypto';
import { SignJWT, exportJWK, generateKeyPair, jwtVerify, errors as joseErrors, type JWK, type JWTPayload, type CryptoKey } from 'jose';
import type { Application, EmulatorState } from './state.ts';
import { json, type EmulatorRequest, type EmulatorResponse, type Router, type ServiceContext, type ServiceName } from './http.ts';

export interface ClientAssertionContext {
  tenantId: string;
  app: Application;
  /** The compact JWT the client sent as client_assertion. */
  assertion: string;
  /** The token endpoint URL, the audience a federated assertion must carry. */
  tokenEndpoint: string;
  state: EmulatorState;
}

export type ClientAssertionVerdict = { ok: true } | { ok: false; code: number; description: string };

/**
 * Decides whether a client assertion authenticates the app. The default (federation.ts) trusts the app's
 * federated identity credentials as Entra ID does; tests may substitute their own.
 */
export type VerifyClientAssertion = (ctx: ClientAssertionContext) => Promise<ClientAssertionVerdict>;

export interface IssueInput {
  audience: string;
  oid: string;
  appId: string;
  roles?: string[];
  claims?: Record<string, unknown>;
  lifetimeSec?: number;
  /** appidacr: 1 = client secret, 2 = certificate or assertion, 0 = public/managed identity. */
  appidacr?: '0' | '1' | '2';
}

export type VerifyResult =
  | { ok: true; claims: JWTPayload & Record<string, unknown> }
  | { ok: false; reason: 'malformed' | 'signature' | 'expired' | 'audience' | 'issuer' };

interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  publicKey: CryptoKey;
  jwk: JWK;
}

const trimSlash = (s: string): string => s.replace(/\/+$/, '');

export class TokenService {
  readonly #state: EmulatorState;
  readonly #keys: SigningKey[] = [];
  readonly #resources = new Map<string, ServiceName | undefined>();
  readonly lifetimeSec: number;
  readonly issuerStyle: 'emulator' | 'sts';
  #loginUrl = '';

  constructor(state: EmulatorState, opts: { lifetimeSec?: number; issuerStyle?: 'emulator' | 'sts' } = {}) {
    this.#state = state;
    this.lifetimeSec = opts.lifetimeSec ?? 3600;
    this.issuerStyle = opts.issuerStyle ?? 'emulator';
  }

  /** Adds a signing key; older keys stay in the JWKS so tokens they signed still verify. */
  async rotateSigningKey(): Promise<string> {
    const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
    const kid = randomUUID().replace(/-/g, '');
    const jwk = { ...(await exportJWK(publicKey)), kid, use: 'sig', alg: 'RS256' };
    this.#keys.push({ kid, privateKey, publicKey, jwk });
    return kid;
  }

  setLoginUrl(url: string): void {
    this.#loginUrl = url;
  }

  /** Issuer of access tokens: v1 form, like Graph and ARM tokens from Entra ID. */
  get issuer(): string {
    return this.issuerStyle === 'sts' ? `https://sts.windows.net/${this.#state.tenantId}/` : `${this.#loginUrl}/${this.#state.tenantId}/`;
  }

  /** A resource (token audience) the directory knows, optionally served by an emulated service. */
  registerResource(uri: string, service?: ServiceName): void {
    this.#resources.set(trimSlash(uri), service);
  }

  isKnownResource(uri: string): boolean {
    return this.#resources.has(trimSlash(uri));
  }

  acceptedAudiences(service: ServiceName): string[] {
    return [...this.#resources].filter(([, s]) => s === service).map(([uri]) => uri);
  }

  jwks(): { keys: JWK[] } {
    return { keys: this.#keys.map((k) => k.jwk) };
  }

  async issue(input: IssueInput): Promise<{ token: string; expiresOn: number }> {
    const key = this.#keys[this.#keys.length - 1];
    const nowSec = Math.floor(this.#state.now() / 1000);
    const exp = nowSec + (input.lifetimeSec ?? this.lifetimeSec);
    const payload: JWTPayload = {
      ...input.claims,
      tid: this.#state.tenantId,
      oid: input.oid,
      sub: input.oid,
      appid: input.appId,
      appidacr: input.appidacr ?? '1',
      idtyp: 'app',
      ver: '1.0',
      ...(input.roles && input.roles.length > 0 ? { roles: input.roles } : {}),
    };
    const token = await new SignJWT(payload)
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: key.kid })
      .setIssuer(this.issuer)
      .setAudience(input.audience)
      .setIssuedAt(nowSec)
      .setNotBefore(nowSec)
      .setExpirationTime(exp)
      .setJti(randomUUID())
      .sign(key.privateKey);
    return { token, expiresOn: exp };
  }

  /** Verifies signature, issuer, lifetime and that `aud` is one of the service's audiences. */
  async verify(token: string, service: ServiceName): Promise<VerifyResult> {
    const accepted = this.acceptedAudiences(service);
    try {
      const { payload } = await jwtVerify(token, async (header) => {
        const k = this.#keys.find((x) => x.kid === header.kid);
        if (!k) throw new joseErrors.JWKSNoMatchingKey();
        return k.publicKey;
      }, { algorithms: ['RS256'], currentDate: new Date(this.#state.now()) });
      if (payload.iss !== this.issuer) return { ok: false, reason: 'issuer' };
      const auds = Array.isArray(payload.aud) ? payload.aud : [payload.aud ?? ''];
      if (!auds.some((a) => accepted.includes(trimSlash(a)))) return { ok: false, reason: 'audience' };
      return { ok: true, claims: payload as JWTPayload & Record<string, unknown> };
    } catch (err) {
      if (err instanceof joseErrors.JWTExpired) return { ok: false, reason: 'expired' };
      if (err instanceof joseErrors.JWSSignatureVerificationFailed || err instanceof joseErrors.JWKSNoMatchingKey) return { ok: false, reason: 'signature' };
      return { ok: false, reason: 'malformed' };
    }
  }
}

/** Entra ID's OAuth error body: the AADSTS code leads the description and is repeated in error_codes. */
export function aadError(status: number, error: string, code: number, description: string): EmulatorResponse {
  const traceId = randomUUID();
  const correlationId = randomUUID();
  const timestamp = new Date().toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  return json(status, {
    error,
    error_description: `AADSTS${code}: ${description} Trace ID: ${traceId} Correlation ID: ${correlationId} Timestamp: ${timestamp}`,
    error_codes: [code],
    timestamp,
    trace_id: traceId,
    correlation_id: correlationId,
    error_uri: `https://login.microsoftonline.com/error?code=${code}`,
  });
}

function resourceFromScope(scope: string): string | undefined {
  const s = scope.split(/\s+/).find((x) => x.endsWith('/.default'));
  return s === undefined ? undefined : s.slice(0, -'/.default'.length);
}

async function tokenRequest(ctx: ServiceContext, verifyAssertion: VerifyClientAssertion, req: EmulatorRequest, version: 'v1' | 'v2'): Promise<EmulatorResponse> {
  const { state, tokens, urls } = ctx;
  if (!state.isTenant(req.params.tenant)) {
    return aadError(400, 'invalid_request', 90002, `Tenant '${req.params.tenant}' not found. Check to make sure you have the correct tenant ID and are signing into the correct cloud.`);
  }
  const form = new URLSearchParams(req.rawBody);
  const grant = form.get('grant_type');
  if (grant !== 'client_credentials') {
    return aadError(400, 'unsupported_grant_type', 70003, `The app requested an unsupported grant type '${grant ?? ''}'.`);
  }
  const clientId = form.get('client_id');
  if (!clientId) return aadError(400, 'invalid_request', 900144, "The request body must contain the following parameter: 'client_id'.");
  const app = state.applicationByAppId(clientId);
  if (!app) {
    return aadError(400, 'unauthorized_client', 700016, `Application with identifier '${clientId}' was not found in the directory '${state.tenantId}'. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You may have sent your authentication request to the wrong tenant.`);
  }
  const sp = state.servicePrincipalByAppId(app.appId);
  if (!sp) return aadError(401, 'invalid_client', 7000229, `The client application ${app.appId} is missing service principal in the tenant ${state.tenantId}.`);
  req.caller = { appId: app.appId, oid: sp.id };

  const tokenEndpoint = `${urls.login}/${state.tenantId}/oauth2/${version === 'v2' ? 'v2.0/' : ''}token`;
  const secret = form.get('client_secret');
  const assertion = form.get('client_assertion');
  let appidacr: '1' | '2';
  if (secret) {
    const check = state.checkSecret(app, secret);
    if (check === 'invalid') {
      return aadError(401, 'invalid_client', 7000215, `Invalid client secret provided. Ensure the secret being sent in the request is the client secret value, not the client secret ID, for a secret added to app '${app.appId}'.`);
    }
    if (check === 'expired') {
      return aadError(401, 'invalid_client', 7000222, `The provided client secret keys for app '${app.appId}' are expired. Visit the Azure portal to create new keys for your app: https://aka.ms/NewClientSecret, or consider using certificate credentials for added security: https://aka.ms/certCreds.`);
    }
    appidacr = '1';
  } else if (assertion) {
    if (form.get('client_assertion_type') !== 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer') {
      return aadError(400, 'invalid_request', 700012, "client_assertion_type must be 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'.");
    }
    const verdict = await verifyAssertion({ tenantId: state.tenantId, app, assertion, tokenEndpoint, state });
    if (!verdict.ok) return aadError(401, 'invalid_client', verdict.code, verdict.description);
    appidacr = '2';
  } else {
    return aadError(401, 'invalid_client', 7000218, "The request body must contain the following parameter: 'client_assertion' or 'client_secret'.");
  }

  const resource = version === 'v2' ? resourceFromScope(form.get('scope') ?? '') : form.get('resource') ?? undefined;
  if (resource === undefined) {
    return aadError(400, 'invalid_scope', 1002012, `The provided value for scope ${form.get('scope') ?? ''} is not valid. Client credential flows must have a scope value with /.default suffixed to the resource identifier (application ID URI).`);
  }
  if (!tokens.isKnownResource(resource)) {
    return aadError(400, 'invalid_resource', 500011, `The resource principal named ${resource} was not found in the tenant named ${state.tenantId}. This can happen if the application has not been installed by the administrator of the tenant or consented to by any user in the tenant. You might have sent your authentication request to the wrong tenant.`);
  }
  const service = tokens.acceptedAudiences('graph').includes(resource.replace(/\/+$/, '')) ? 'graph' : undefined;
  const { token, expiresOn } = await tokens.issue({
    audience: resource,
    oid: sp.id,
    appId: app.appId,
    appidacr,
    // Application permissions appear as `roles` only in tokens for the API that defines them.
    roles: service === 'graph' ? app.graphPermissions : undefined,
  });
  const expiresIn = expiresOn - Math.floor(state.now() / 1000);
  return json(200, {
    token_type: 'Bearer',
    expires_in: expiresIn,
    ext_expires_in: expiresIn,
    ...(version === 'v1' ? { expires_on: String(expiresOn), resource } : {}),
    access_token: token,
  });
}

function discovery(ctx: ServiceContext, req: EmulatorRequest, version: 'v1' | 'v2'): EmulatorResponse {
  const { state, urls, tokens } = ctx;
  if (!state.isTenant(req.params.tenant)) {
    return aadError(400, 'invalid_tenant', 90002, `Tenant '${req.params.tenant}' not found.`);
  }
  const base = `${urls.login}/${state.tenantId}`;
  const v = version === 'v2' ? '/v2.0' : '';
  return json(200, {
    token_endpoint: `${base}/oauth2${v}/token`,
    token_endpoint_auth_methods_supported: ['client_secret_post', 'private_key_jwt', 'client_secret_basic'],
    jwks_uri: `${base}/discovery${v}/keys`,
    response_types_supported: ['code', 'id_token', 'code id_token', 'token id_token', 'token'],
    subject_types_supported: ['pairwise'],
    id_token_signing_alg_values_supported: ['RS256'],
    authorization_endpoint: `${base}/oauth2${v}/authorize`,
    issuer: version === 'v2' ? `${base}/v2.0` : tokens.issuer,
    tenant_region_scope: 'EU',
    cloud_instance_name: new URL(urls.login).host,
    // Where this directory's Graph lives; MSAL and the Graph client read nothing else from here.
    msgraph_host: new URL(urls.graph).host,
  });
}

export function registerEntra(router: Router, ctx: ServiceContext, verifyAssertion: VerifyClientAssertion): void {
  router
    .add('GET', '/:tenant/v2.0/.well-known/openid-configuration', (req) => discovery(ctx, req, 'v2'))
    .add('GET', '/:tenant/.well-known/openid-configuration', (req) => discovery(ctx, req, 'v1'))
    .add('GET', '/:tenant/discovery/v2.0/keys', () => json(200, ctx.tokens.jwks()))
    .add('GET', '/:tenant/discovery/keys', () => json(200, ctx.tokens.jwks()))
    .add('POST', '/:tenant/oauth2/v2.0/token', (req) => tokenRequest(ctx, verifyAssertion, req, 'v2'))
    .add('POST', '/:tenant/oauth2/token', (req) => tokenRequest(ctx, verifyAssertion, req, 'v1'));
}

export type BearerResult = VerifyResult | { ok: false; reason: 'missing' };

/** Checks the Authorization header the way a resource API does and records the caller. */
export async function authenticateBearer(ctx: ServiceContext, req: EmulatorRequest, service: ServiceName): Promise<BearerResult> {
  const h = req.headers.authorization;
  const m = typeof h === 'string' ? /^Bearer\s+(\S+)\s*$/i.exec(h) : null;
  if (!m) return { ok: false, reason: 'missing' };
  const result = await ctx.tokens.verify(m[1], service);
  if (result.ok) req.caller = { appId: String(result.claims.appid ?? ''), oid: String(result.claims.oid ?? '') };
  return result;
}
