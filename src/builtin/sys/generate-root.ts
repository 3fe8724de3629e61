import { randomUUID } from 'node:crypto';
import type { Core } from '../../core/core.ts';
import { BadRequestError } from '../../core/errors.ts';
import { field } from '../../core/fields.ts';
import { definePath, type PathDefinition } from '../../core/framework.ts';
import { randomBase62 } from '../../core/ids.ts';
import { TOKEN_LENGTH } from '../../core/tokens.ts';
import { requireUnsealKey } from './seal.ts';

/**
 * Vault's sys/generate-root (1.10+ flavour): an attempt is started without a token and gets a nonce and a one-time
 * pad made by the server; the unseal key, sent to `update` with the nonce, completes it (Strongroom has one key, so
 * the threshold is one). The answer carries the new root token XORed with the pad, base64 without padding, which
 * only the holder of the pad can decode (`vault operator generate-root -decode`). The attempt lives in this node's
 * memory, as in Vault: another node, or a restart, knows nothing of it.
 */
interface Attempt {
  nonce: string;
  otp: string;
}

/** What an attempt's status shows: the pad only when it starts, the encoded token only when it completes. */
function attemptStatus(a: { nonce: string; otp?: string; encoded?: string } | undefined): Record<string, unknown> {
  return {
    started: a !== undefined, nonce: a?.nonce ?? '', progress: a?.encoded ? 1 : 0, required: 1, complete: a?.encoded !== undefined,
    encoded_token: a?.encoded ?? '', encoded_root_token: a?.encoded ?? '', pgp_fingerprint: '', otp_length: TOKEN_LENGTH, otp: a?.otp ?? '',
  };
}

/** The one attempt a node may have at a time. */
class RootGeneration {
  #attempt: Attempt | undefined;

  get attempt(): Attempt | undefined {
    return this.#attempt;
  }

  start(): Attempt {
    if (this.#attempt) throw new BadRequestError('root generation already in progress');
    this.#attempt = { nonce: randomUUID(), otp: randomBase62(TOKEN_LENGTH) };
    return this.#attempt;
  }

  cancel(): void {
    this.#attempt = undefined;
  }

  /** The attempt `nonce` names; a 400 when there is none or it is another one. */
  current(nonce: string | undefined): Attempt {
    if (!this.#attempt) throw new BadRequestError('no root generation in progress');
    if (!nonce) throw new BadRequestError('missing required field "nonce"');
    if (nonce !== this.#attempt.nonce) throw new BadRequestError('invalid value for field "nonce": the attempt in progress has another nonce');
    return this.#attempt;
  }

  /** Ends `attempt` for its completion: of two updates verified at once, one completes it, the other is refused. */
  finish(attempt: Attempt): void {
    if (this.#attempt !== attempt) throw new BadRequestError('no root generation in progress');
    this.#attempt = undefined;
  }
}

/** The token XOR the pad (both ASCII of the same length), as Vault's roottoken package encodes it. */
export function encodeWithOtp(token: string, otp: string): string {
  if (token.length !== otp.length) throw new Error('the root token and the one-time pad differ in length');
  const out = Buffer.from(token);
  const pad = Buffer.from(otp);
  for (let i = 0; i < out.length; i++) out[i] ^= pad[i];
  return out.toString('base64').replace(/=+$/, '');
}

export function generateRootPaths(core: Core): PathDefinition[] {
  const generation = new RootGeneration();
  const raw = (body: unknown) => ({ raw: { status: 200, body: JSON.stringify(body) } });
  return [
    definePath({
      pattern: 'generate-root/attempt',
      description: 'The root token generation attempt: read its status, start one (the server makes the one-time pad and returns it once), or cancel it.',
      unauthenticated: true,
      rawResponse: ['application/json'],
      fields: {
        otp: field.string('A pad chosen by the client (Vault before 1.10): refused, the server makes the pad.', { maxLength: 256 }),
        pgp_key: field.string('A PGP key to encrypt the token to: refused, not supported.', { maxLength: 64 * 1024 }),
      },
      operations: {
        read: async () => raw(attemptStatus(generation.attempt && { nonce: generation.attempt.nonce })),
        update: async (req) => {
          if (req.data.pgp_key) throw new BadRequestError('invalid value for field "pgp_key": PGP-encrypted root tokens are not supported; start the attempt without a body and use the returned otp');
          if (req.data.otp) throw new BadRequestError('invalid value for field "otp": the server makes the one-time pad; start the attempt without a body and use the returned otp');
          return raw(attemptStatus(generation.start()));
        },
        delete: async () => void generation.cancel(),
      },
    }),
    definePath({
      pattern: 'generate-root/update',
      description: 'Submit the unseal key for the attempt in progress (threshold one): the answer carries the new root token encoded with the pad.',
      unauthenticated: true,
      rawResponse: ['application/json'],
      fields: {
        key: field.string('The unseal key, base64- or hex-encoded.', { maxLength: 256 }),
        nonce: field.string('The nonce of the attempt in progress.', { maxLength: 64 }),
      },
      operations: {
        update: async (req) => {
          const attempt = generation.current(req.data.nonce);
          const key = requireUnsealKey(req.data.key);
          if (!(await core.barrier.opensWith(key))) throw new BadRequestError('invalid value for field "key": the key does not unseal this store');
          generation.finish(attempt);
          const { token } = await core.createRootToken();
          core.logger.warn('a new root token was generated with the unseal key (sys/generate-root)');
          return raw(attemptStatus({ nonce: attempt.nonce, encoded: encodeWithOtp(token, attempt.otp) }));
        },
      },
    }),
  ];
}
