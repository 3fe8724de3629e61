// Workload identity federation, as Entra ID does it: federated identity credentials on an application
// (Graph), and a token endpoint that accepts a client_assertion JWT from an external issuer when one of
// them matches its iss/sub/aud, after fetching the issuer's discovery document and JWKS and checking the
// signature and lifetime. Loopback http issuers are allowed so a Strongroom test server can be the issuer.
import { randomUUID } from 'node:crypto';
import { createLocalJWKSet, decodeJwt, errors as joseErrors, jwtVerify, type JSONWebKeySet, type JWTPayload } from 'jose';
import type { ClientAssertionVerdict, VerifyClientAssertion } from './entra.ts';
import { graphError } from './graph.ts';
import { json, type EmulatorRequest, type EmulatorResponse, type Handler, type Router } from './http.ts';
import type { Application, FederatedIdentityCredential } from './state.ts';

/** Entra ID's limits on federated identity credentials. */
const MAX_PER_APP = 20;
const MAX_VALUE_LENGTH = 600;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{2,119}$/;
const FETCH_TIMEOUT_MS = 5000;

const refuse = (code: number, description: string): ClientAssertionVerdict => ({ ok: false, code, description });

/** https anywhere; http only on loopback, where the emulator's callers (test servers) live. */
function reachableUrl(raw: string): URL | undefined {
  try {
    const url = new URL(raw);
    if (url.protocol === 'https:') return url;
    if (url.protocol === 'http:' && ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return url;
  } catch {
    // not a URL
  }
  return undefined;
}

async function fetchJson(url: URL): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(FETCH_TIMEOUT_MS), redirect: 'error' });
  if (res.status !== 200) throw new Error(`${url.href} answered ${res.status}`);
  return res.json();
}

/** The issuer's keys, found the way Entra ID finds them: discovery document, then its jwks_uri. */
async function issuerKeys(issuer: string): Promise<JSONWebKeySet | string> {
  const discoveryUrl = reachableUrl(`${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`);
  if (!discoveryUrl) return `the issuer '${issuer}' is not an https URL`;
  let discovery: { issuer?: unknown; jwks_uri?: unknown };
  try {
    discovery = (await fetchJson(discoveryUrl)) as typeof discovery;
  } catch (err) {
    return `could not fetch ${discoveryUrl.href}: ${(err as Error).message}`;
  }
  if (discovery.issuer !== issuer) return `the discovery document names issuer '${String(discovery.issuer)}', not '${issuer}'`;
  const jwksUrl = typeof discovery.jwks_uri === 'string' ? reachableUrl(discovery.jwks_uri) : undefined;
  if (!jwksUrl) return `the discovery document has no usable jwks_uri`;
  try {
    const jwks = (await fetchJson(jwksUrl)) as JSONWebKeySet;
    if (!Array.isArray(jwks?.keys)) return `${jwksUrl.href} is not a JWK set`;
    return jwks;
  } catch (err) {
    return `could not fetch ${jwksUrl.href}: ${(err as Error).message}`;
  }
}

/** The federated credential the assertion's issuer, subject and audience select, or Entra's refusal. */
function matchCredential(app: Application, claims: JWTPayload): FederatedIdentityCredential | ClientAssertionVerdict {
  const iss = claims.iss ?? '';
  const sub = claims.sub ?? '';
  const auds = Array.isArray(claims.aud) ? claims.aud : [claims.aud ?? ''];
  const check = 'Please check your federated identity credential Subject, Audience and Issuer against the presented assertion.';
  if (app.federatedIdentityCredentials.length === 0) {
    return refuse(70021, `No matching federated identity record found for presented assertion. Assertion Issuer: '${iss}'. Assertion Subject: '${sub}'. Assertion Audience: '${auds.join(',')}'.`);
  }
  const byIssuer = app.federatedIdentityCredentials.filter((f) => f.issuer === iss);
  if (byIssuer.length === 0) return refuse(700211, `No matching federated identity record found for presented assertion issuer '${iss}'. ${check}`);
  const bySubject = byIssuer.filter((f) => f.subject === sub);
  if (bySubject.length === 0) {
    return refuse(700213, `No matching federated identity record found for presented assertion subject '${sub}'. Please note that the matching is done using a case-sensitive comparison. ${check}`);
  }
  const match = bySubject.find((f) => auds.some((a) => f.audiences.includes(a)));
  return match ?? refuse(700212, `No matching federated identity record found for presented assertion audience '${auds.join(',')}'. ${check}`);
}

/** The token endpoint's client_assertion check (the emulator's default; see entra.ts for the seam). */
export const verifyFederatedAssertion: VerifyClientAssertion = async ({ app, assertion, state }) => {
  let claims: JWTPayload;
  try {
    claims = decodeJwt(assertion);
  } catch {
    return refuse(50027, 'JWT token is invalid or malformed.');
  }
  const match = matchCredential(app, claims);
  if ('ok' in match) return match;
  const keys = await issuerKeys(match.issuer);
  if (typeof keys === 'string') return refuse(50166, `Request to External OIDC endpoint failed: ${keys}.`);
  try {
    await jwtVerify(assertion, createLocalJWKSet(keys), {
      issuer: match.issuer, subject: match.subject, audience: match.audiences, currentDate: new Date(state.now()),
    });
    return { ok: true };
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired || (err instanceof joseErrors.JWTClaimValidationFailed && err.claim === 'nbf')) {
      return refuse(700024, `Client assertion is not within its valid time range. Current time: ${state.isoNow()}.`);
    }
    if (err instanceof joseErrors.JWSSignatureVerificationFailed || err instanceof joseErrors.JWKSNoMatchingKey) {
      return refuse(700027, 'Client assertion failed signature validation.');
    }
    return refuse(50027, `JWT token is invalid or malformed: ${(err as Error).message}.`);
  }
};

/** What the Graph module lends this one: its bearer/permission guard and entity envelope. */
export interface GraphHelpers {
  guarded(perm: 'appRead' | 'appWrite', handler: (req: EmulatorRequest, body: Record<string, unknown>) => EmulatorResponse | Promise<EmulatorResponse>): Handler;
  entity(collection: string, view: Record<string, unknown>, status?: number): EmulatorResponse;
}

const invalid = (property: string): EmulatorResponse =>
  graphError(400, 'Request_BadRequest', `Invalid value specified for property '${property}' of resource 'FederatedIdentityCredential'.`);

function ficView(f: FederatedIdentityCredential): Record<string, unknown> {
  return { id: f.id, name: f.name, issuer: f.issuer, subject: f.subject, description: null, audiences: f.audiences };
}

const boundedString = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= MAX_VALUE_LENGTH;

/** Graph v1.0 `applications/{id}/federatedIdentityCredentials` (create, list, get and delete by id or name). */
export function registerFederatedCredentials(router: Router, state: { applications: Map<string, Application> }, graph: GraphHelpers): void {
  const collection = (appId: string) => `applications('${appId}')/federatedIdentityCredentials`;
  const appNotFound = (id: string) => graphError(404, 'Request_ResourceNotFound', `Resource '${id}' does not exist or one of its queried reference-property objects are not present.`);
  const find = (app: Application, key: string) => app.federatedIdentityCredentials.find((f) => f.id === key || f.name === key);

  router
    .add('POST', '/v1.0/applications/:id/federatedIdentityCredentials', graph.guarded('appWrite', (req, body) => {
      const app = state.applications.get(req.params.id);
      if (!app) return appNotFound(req.params.id);
      if (typeof body.name !== 'string' || !NAME.test(body.name)) return invalid('name');
      if (!boundedString(body.issuer) || !reachableUrl(body.issuer)) return invalid('issuer');
      if (!boundedString(body.subject)) return invalid('subject');
      // Entra ID accepts exactly one audience per credential.
      if (!Array.isArray(body.audiences) || body.audiences.length !== 1 || !boundedString(body.audiences[0])) return invalid('audiences');
      if (app.federatedIdentityCredentials.length >= MAX_PER_APP) {
        return graphError(400, 'Request_BadRequest', `An application can have at most ${MAX_PER_APP} federated identity credentials.`);
      }
      if (find(app, body.name)) return graphError(409, 'Request_MultipleObjectsWithSameKeyValue', `FederatedIdentityCredential with name ${body.name} already exists.`);
      if (app.federatedIdentityCredentials.some((f) => f.issuer === body.issuer && f.subject === body.subject)) {
        return graphError(409, 'Request_MultipleObjectsWithSameKeyValue', 'FederatedIdentityCredential with same issuer and subject combination already exists.');
      }
      const created: FederatedIdentityCredential = { id: randomUUID(), name: body.name, issuer: body.issuer, subject: body.subject, audiences: [body.audiences[0] as string] };
      app.federatedIdentityCredentials.push(created);
      return graph.entity(collection(app.id), ficView(created), 201);
    }))
    .add('GET', '/v1.0/applications/:id/federatedIdentityCredentials', graph.guarded('appRead', (req) => {
      const app = state.applications.get(req.params.id);
      return app ? json(200, { value: app.federatedIdentityCredentials.map(ficView) }) : appNotFound(req.params.id);
    }))
    .add('GET', '/v1.0/applications/:id/federatedIdentityCredentials/:fic', graph.guarded('appRead', (req) => {
      const app = state.applications.get(req.params.id);
      if (!app) return appNotFound(req.params.id);
      const fic = find(app, req.params.fic);
      return fic ? graph.entity(collection(app.id), ficView(fic)) : appNotFound(req.params.fic);
    }))
    .add('DELETE', '/v1.0/applications/:id/federatedIdentityCredentials/:fic', graph.guarded('appWrite', (req) => {
      const app = state.applications.get(req.params.id);
      if (!app) return appNotFound(req.params.id);
      const fic = find(app, req.params.fic);
      if (!fic) return appNotFound(req.params.fic);
      app.federatedIdentityCredentials = app.federatedIdentityCredentials.filter((f) => f !== fic);
      return json(204);
    }));
}
