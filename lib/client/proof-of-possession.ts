/**
 * Proof of possession (DPoP, RFC 9449) as a plug-in. The token client calls
 * it on every token request and on every API request that carries a token of
 * its `scheme`, and shows it every refused answer so it can keep a server
 * nonce; when it answers `true` the request is sent once more (a token request
 * then also gets fresh client authentication).
 */
export interface TokenProofRequest {
  readonly url: string;
  readonly method: 'POST';
  /** Headers of the token request; add the proof here. */
  readonly headers: Record<string, string>;
}

export interface ApiProofRequest {
  readonly url: string;
  readonly method: string;
  /** Headers of the API request; add the proof here. */
  readonly headers: Headers;
  /** The access token the request carries (for `ath`). */
  readonly accessToken: string;
}

/** An answer that was not refused (`answered()`). */
export interface Answer {
  readonly kind: 'token' | 'api';
  readonly url: string;
  readonly status: number;
  readonly headers: Headers;
}

export interface RefusedAnswer {
  readonly kind: 'token' | 'api';
  readonly url: string;
  readonly status: number;
  readonly headers: Headers;
  /** The OAuth error code: from the JSON body (token endpoint) or the challenge of `scheme` (API). */
  readonly error: string | undefined;
  /**
   * The request that was refused: the object given to tokenRequest() or apiRequest() for it, so that a plug-in
   * can tell what its proof carried (DPoP: the nonce) from what it has learnt since (another request's answer).
   */
  readonly request?: TokenProofRequest | ApiProofRequest;
}

export interface ProofOfPossession {
  /** The token type and Authorization scheme it handles, e.g. `DPoP`. */
  readonly scheme: string;
  /**
   * Names the key tokens get bound to (DPoP: its RFC 7638 thumbprint). Part
   * of the shared token store's key, so that instances holding different
   * keys never take each other's tokens; without it they share by scheme.
   */
  readonly keyId?: string;
  /** Adds a proof to a token request (each attempt). */
  tokenRequest(request: TokenProofRequest): void | Promise<void>;
  /** Adds a proof to an API request that carries a token of type `scheme`. */
  apiRequest(request: ApiProofRequest): void | Promise<void>;
  /** `true`: send the request once more (e.g. `use_dpop_nonce` with a new `DPoP-Nonce`). */
  retry(answer: RefusedAnswer): boolean;
  /** Sees every other answer to a request it added a proof to (DPoP: a server may send its next nonce with a success). */
  answered?(answer: Answer): void;
}
