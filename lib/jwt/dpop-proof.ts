import { createHash, createPrivateKey, createPublicKey, KeyObject, randomBytes } from 'node:crypto';
import type { JsonWebKey, JwkInput } from './jwk';
import { isDpopAlgorithm, keyTypeOf, signJws, type DpopAlgorithm } from './algorithms';
import { jwkThumbprint, publicKeyMembers } from './thumbprint';

/** `ath` (RFC 9449 §4.2): base64url SHA-256 of the ASCII access token. */
export function accessTokenHash(accessToken: string): string {
  return createHash('sha256').update(accessToken, 'ascii').digest('base64url');
}

/** The `htu` of a request URL: scheme, authority and path; query and fragment dropped (RFC 9449 §4.2). */
export function proofHtu(url: string | URL): string {
  const parsed = typeof url === 'string' ? new URL(url) : url;
  return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
}

export interface DpopKeyOptions {
  /** The client's private key: a KeyObject or a private JWK. */
  privateKey: KeyObject | JwkInput;
  /** Its public JWK, when known (saves deriving it). */
  publicJwk?: JwkInput;
  /** Default: ES256 for P-256, ES384 for P-384, PS256 for RSA. */
  alg?: DpopAlgorithm;
}

export interface DpopProofRequest {
  /** HTTP method, as sent (`POST`, `GET`). */
  htm: string;
  /** The request URL; query and fragment are dropped. */
  htu: string | URL;
  /** When given, `ath` binds the proof to this access token (resource requests). */
  accessToken?: string;
  /** The server's last `DPoP-Nonce`, when it gave one. */
  nonce?: string;
  /** Seconds since the epoch; default now. */
  iat?: number;
  /** Default: 128 random bits. */
  jti?: string;
}

function defaultAlgorithm(jwk: JsonWebKey): DpopAlgorithm {
  if (jwk.kty === 'EC' && jwk.crv === 'P-256') return 'ES256';
  if (jwk.kty === 'EC' && jwk.crv === 'P-384') return 'ES384';
  if (jwk.kty === 'RSA') return 'PS256';
  throw new TypeError(`no DPoP algorithm for a ${String(jwk.kty)} ${jwk.crv ?? ''} key; use a P-256, P-384 or RSA key`);
}

/**
 * A client's DPoP key, prepared once: the public JWK, its RFC 7638
 * thumbprint and the encoded JOSE header are computed here, so each proof
 * costs one signature.
 */
export class DpopKey {
  readonly alg: DpopAlgorithm;
  /** The public JWK that goes in each proof's header. */
  readonly publicJwk: JsonWebKey;
  /** RFC 7638 thumbprint of the key: the `cnf.jkt` of tokens bound to it. */
  readonly jkt: string;
  private readonly privateKey: KeyObject;
  private readonly encodedHeader: string;

  constructor(options: DpopKeyOptions) {
    this.privateKey =
      options.privateKey instanceof KeyObject ? options.privateKey : createPrivateKey({ key: options.privateKey as JsonWebKey, format: 'jwk' });
    if (this.privateKey.type !== 'private') throw new TypeError('a DPoP key needs the private key');
    const publicJwk = publicKeyMembers((options.publicJwk as JsonWebKey | undefined) ?? createPublicKey(this.privateKey).export({ format: 'jwk' }));
    const alg = options.alg ?? defaultAlgorithm(publicJwk);
    if (!isDpopAlgorithm(alg)) throw new TypeError(`${String(alg)} is not a DPoP algorithm`);
    const need = keyTypeOf(alg);
    if (publicJwk.kty !== need.kty || (need.crv !== undefined && publicJwk.crv !== need.crv)) {
      throw new TypeError(`${alg} needs a ${need.kty} ${need.crv ?? ''} key`.replace(/ +$/, ''));
    }
    this.alg = alg;
    this.publicJwk = publicJwk;
    this.jkt = jwkThumbprint(publicJwk);
    this.encodedHeader = Buffer.from(JSON.stringify({ typ: 'dpop+jwt', alg, jwk: publicJwk })).toString('base64url');
  }

  /** A compact JWS proof for one request. */
  proof(request: DpopProofRequest): string {
    const payload: Record<string, unknown> = {
      jti: request.jti ?? randomBytes(16).toString('base64url'),
      htm: request.htm,
      htu: proofHtu(request.htu),
      iat: request.iat ?? Math.floor(Date.now() / 1000),
    };
    if (request.accessToken !== undefined) payload.ath = accessTokenHash(request.accessToken);
    if (request.nonce !== undefined) payload.nonce = request.nonce;
    const input = `${this.encodedHeader}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}`;
    return `${input}.${signJws(this.alg, this.privateKey, input).toString('base64url')}`;
  }
}

/**
 * One proof, for callers that make few: `{ proof, jkt }`. Callers that make
 * many keep a `DpopKey` instead.
 */
export function createDpopProof(options: DpopKeyOptions & DpopProofRequest): { proof: string; jkt: string } {
  const key = new DpopKey(options);
  return { proof: key.proof(options), jkt: key.jkt };
}
