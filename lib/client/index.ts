/**
 * The calling side: `createTokenClient()` gets client-credentials tokens,
 * caches them, renews them ahead of expiry and attaches them to requests.
 * Imports nothing from Express, the stores or the server side.
 */
import { fetchWithToken, type FetchParams } from './fetch';
import { parseOptions, type TokenClientOptions } from './options';
import type { AccessToken, TokenParams } from './cache-entry';
import { TokenCache } from './token-client';

export interface TokenClient {
  /** A token for `params` (the client's scope and resource when absent). */
  getToken(params?: TokenParams & { signal?: AbortSignal }): Promise<AccessToken>;
  /** Global `fetch` with the token attached and 401s handled; `params` picks another scope or resource, or says whether a 401 may be retried. */
  fetch(input: string | URL | Request, init?: RequestInit, params?: FetchParams): Promise<Response>;
  /** Stops background work and aborts token requests in flight; later calls reject. */
  close(): Promise<void>;
}

export function createTokenClient(options: TokenClientOptions): TokenClient {
  const cache = new TokenCache(parseOptions(options));
  return {
    async getToken(params) {
      const got = cache.token(cache.entry(params), params?.signal);
      return (got instanceof Promise ? await got : got).value;
    },
    fetch: (input, init, params) => fetchWithToken(cache, input, init, params),
    async close() {
      cache.close();
    },
  };
}

export { TokenEndpointError, TokenClientClosedError } from './errors';
export type { TokenEndpointErrorInit } from './errors';
export { clientSecretBasic, clientSecretPost, privateKeyJwt, formEncode } from './auth';
export type { ClientAuthentication, ClientAuthContext, TokenRequestParts, PrivateKeyJwtOptions } from './auth';
export { DpopProof } from './dpop';
export type { DpopClientOptions } from './dpop';
export type { ProofOfPossession, TokenProofRequest, ApiProofRequest, RefusedAnswer, Answer } from './proof-of-possession';
export type { TokenStore, StoredToken, FoundToken, ReleaseLock } from './store';
export { redisTokenStore } from './redis-store';
export type { RedisLike, RedisMulti, RedisTokenStoreOptions, EncryptionKey } from './redis-store';
export type { TokenClientOptions, TokenClientEvent, TokenRequestReason, StoreOperation, AuthMethod } from './options';
export type { AccessToken, TokenParams } from './cache-entry';
export type { FetchParams } from './fetch';
export type { FetchLike } from './http';
export type { JsonWebKey, JwkInput } from '../jwt/jwk';
