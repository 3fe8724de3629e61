// Managed-identity access tokens as IMDS hands them to a workload, and the v1 discovery document and
// JWKS a relying party (the cloud auth method) verifies them with. Azure issues them with the v1
// issuer https://sts.windows.net/<tenant>/ (or, when configured, the emulator's own issuer) and adds
// xms_mirid / xms_az_rid only for first-party audiences:
//   system-assigned: xms_mirid = the host's resource id, no xms_az_rid;
//   user-assigned:   xms_mirid = the identity's resource id, xms_az_rid = the host's resource id.
// These keys are separate from the token service's so tests can also forge tokens (wrong issuer,
// future nbf, foreign kid) that are signed with a key the directory really publishes.
import { randomUUID } from 'node:crypto';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import { aadError } from './entra.ts';
import { json, type EmulatorRequest, type Router, type ServiceContext } from './http.ts';
import type { ManagedIdentity } from './state.ts';

export interface MintInput {
  identity: Pick<ManagedIdentity, 'principalId' | 'clientId'>;
  audience: string;
  /** Resource id of the VM, scale set, VMSS instance or app the workload runs on. */
  hostResourceId?: string;
  /** Resource id of the user-assigned identity the token was requested for (none: system-assigned). */
  userAssignedResourceId?: string;
  groups?: string[];
  /** Overrides for forged-token tests. */
  issuer?: string;
  issuedAtSec?: number;
  notBeforeSec?: number;
  expiresAtSec?: number;
  kid?: string;
  claims?: Record<string, unknown>;
}

interface Key {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

export class ManagedIdentityTokens {
  readonly #ctx: ServiceContext;
  readonly #keys: Key[] = [];
  readonly issuerStyle: 'sts' | 'emulator';

  constructor(ctx: ServiceContext, issuerStyle: 'sts' | 'emulator' = 'sts') {
    this.#ctx = ctx;
    this.issuerStyle = issuerStyle;
  }

  get issuer(): string {
    return this.issuerStyle === 'sts' ? `https://sts.windows.net/${this.#ctx.state.tenantId}/` : this.#ctx.tokens.issuer;
  }

  /** Adds a signing key (the newest signs); returns its kid. Older keys stay published. */
  async rotateSigningKey(): Promise<string> {
    const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
    const kid = randomUUID().replace(/-/g, '');
    this.#keys.push({ kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, use: 'sig', alg: 'RS256' } });
    return kid;
  }

  /** The published public keys, as JWKs (tests use one to forge an HS256 token). */
  publicJwks(): JWK[] {
    return this.#keys.map((k) => k.jwk);
  }

  async mint(input: MintInput): Promise<string> {
    if (this.#keys.length === 0) await this.rotateSigningKey();
    const key = this.#keys[this.#keys.length - 1];
    const now = Math.floor(this.#ctx.state.now() / 1000);
    const iat = input.issuedAtSec ?? now;
    const xms: Record<string, string> = {};
    if (input.userAssignedResourceId) {
      xms.xms_mirid = input.userAssignedResourceId;
      if (input.hostResourceId) xms.xms_az_rid = input.hostResourceId;
    } else if (input.hostResourceId) {
      xms.xms_mirid = input.hostResourceId;
    }
    const payload: JWTPayload = {
      tid: this.#ctx.state.tenantId,
      oid: input.identity.principalId,
      sub: input.identity.principalId,
      appid: input.identity.clientId,
      appidacr: '2',
      idtyp: 'app',
      ver: '1.0',
      ...xms,
      ...(input.groups ? { groups: input.groups } : {}),
      ...input.claims,
    };
    return new SignJWT(payload)
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT', kid: input.kid ?? key.kid })
      .setIssuer(input.issuer ?? this.issuer)
      .setAudience(input.audience)
      .setIssuedAt(iat)
      .setNotBefore(input.notBeforeSec ?? iat)
      // Managed identity tokens live 24 hours in Azure.
      .setExpirationTime(input.expiresAtSec ?? iat + 24 * 3600)
      .sign(key.privateKey);
  }
}

/**
 * Serves the v1 discovery document and JWKS. Registered ahead of the Entra module's own v1 routes:
 * the v1 issuer is the managed-identity issuer and the JWKS publishes both key sets. MSAL reads only
 * the v2 document, which stays the token service's.
 */
export function registerManagedIdentityTokens(router: Router, ctx: ServiceContext, mi: ManagedIdentityTokens): void {
  const sameTenant = (req: EmulatorRequest): boolean => ctx.state.isTenant(req.params.tenant);
  router
    .add('GET', '/:tenant/.well-known/openid-configuration', (req) => {
      if (!sameTenant(req)) return aadError(400, 'invalid_tenant', 90002, `Tenant '${req.params.tenant}' not found.`);
      const base = `${ctx.urls.login}/${ctx.state.tenantId}`;
      return json(200, {
        token_endpoint: `${base}/oauth2/token`,
        jwks_uri: `${base}/discovery/keys`,
        authorization_endpoint: `${base}/oauth2/authorize`,
        issuer: mi.issuer,
        id_token_signing_alg_values_supported: ['RS256'],
        response_types_supported: ['code', 'id_token', 'code id_token', 'token id_token', 'token'],
        subject_types_supported: ['pairwise'],
        token_endpoint_auth_methods_supported: ['client_secret_post', 'private_key_jwt', 'client_secret_basic'],
        cloud_instance_name: new URL(ctx.urls.login).host,
        msgraph_host: new URL(ctx.urls.graph).host,
      });
    })
    .add('GET', '/:tenant/discovery/keys', (req) => {
      if (!sameTenant(req)) return aadError(400, 'invalid_tenant', 90002, `Tenant '${req.params.tenant}' not found.`);
      return json(200, { keys: [...ctx.tokens.jwks().keys, ...mi.publicJwks()] });
    });
}
