import type { KeyObject } from 'node:crypto';
import type { JsonWebKey, JwkInput } from '../jwt/jwk';
import type { DpopAlgorithm } from '../jwt/algorithms';
import { DpopKey } from '../jwt/dpop-proof';
import type { Answer, ApiProofRequest, ProofOfPossession, RefusedAnswer, TokenProofRequest } from './proof-of-possession';

/** The `dpop` option of createTokenClient(). */
export interface DpopClientOptions {
  /** The client's DPoP private key (P-256, P-384 or RSA), a KeyObject or a private JWK. Keep it in memory only. */
  privateKey: KeyObject | JwkInput;
  /** Default: ES256 for P-256, ES384 for P-384, PS256 for RSA. */
  alg?: DpopAlgorithm;
}

/** Most origins whose last DPoP-Nonce is kept. */
const MAX_ORIGINS = 100;

function originOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}

/**
 * DPoP (RFC 9449) for the token client: a proof on every token request and
 * on every API request carrying a DPoP token (with `ath`), the last
 * `DPoP-Nonce` of each origin put in the next proofs, and one more attempt
 * when a server answers `use_dpop_nonce` with a new nonce. The key is
 * prepared once; each proof costs one signature.
 */
export class DpopProof implements ProofOfPossession {
  readonly scheme = 'DPoP';
  readonly key: DpopKey;
  private readonly nonces = new Map<string, string>();
  /** The nonce each request's proof carried (`null`: none), for retry(). */
  private readonly carried = new WeakMap<TokenProofRequest | ApiProofRequest, string | null>();

  constructor(options: DpopClientOptions) {
    if (!options || typeof options !== 'object' || options.privateKey === undefined) throw new TypeError('option dpop needs privateKey');
    this.key = new DpopKey({ privateKey: options.privateKey, alg: options.alg });
  }

  /** The key's RFC 7638 thumbprint: the `cnf.jkt` of the tokens bound to it. */
  get keyId(): string {
    return this.key.jkt;
  }

  tokenRequest(request: TokenProofRequest): void {
    const nonce = this.nonces.get(originOf(request.url));
    this.carried.set(request, nonce ?? null);
    request.headers.DPoP = this.key.proof({ htm: 'POST', htu: request.url, nonce });
  }

  apiRequest(request: ApiProofRequest): void {
    const nonce = this.nonces.get(originOf(request.url));
    this.carried.set(request, nonce ?? null);
    request.headers.set('DPoP', this.key.proof({ htm: request.method, htu: request.url, accessToken: request.accessToken, nonce }));
  }

  retry(answer: RefusedAnswer): boolean {
    // what the refused proof carried: not the origin's latest nonce, which a request refused at the same time may
    // have set already (then every other one of a burst was given up on, its 401 or 400 handed to the caller)
    const sent = answer.request !== undefined && this.carried.has(answer.request) ? (this.carried.get(answer.request) ?? undefined) : this.nonces.get(originOf(answer.url));
    const nonce = this.answered(answer);
    // a retry only helps when the server asked for a nonce and gave one this proof did not carry
    return nonce !== undefined && answer.error === 'use_dpop_nonce' && nonce !== sent;
  }

  /** Keeps the answer's `DPoP-Nonce` (a well-formed one) for the next proofs to its origin; returns it. */
  answered(answer: Answer): string | undefined {
    const nonce = answer.headers.get('dpop-nonce');
    if (nonce === null || nonce === '' || !/^[\x21\x23-\x5b\x5d-\x7e]+$/.test(nonce)) return undefined;
    const origin = originOf(answer.url);
    if (this.nonces.get(origin) === nonce) return nonce;
    this.nonces.delete(origin);
    if (this.nonces.size >= MAX_ORIGINS) this.nonces.delete(this.nonces.keys().next().value as string);
    this.nonces.set(origin, nonce);
    return nonce;
  }
}
