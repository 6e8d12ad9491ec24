export { createIssuer } from './create-issuer';
export type { Issuer, KeyInfo } from './create-issuer';
export { requireBearer, stopRevocationListPolling } from './require-bearer';
export type { BearerHealth, BearerMiddleware } from './require-bearer';
export type { IssuerOptions, BearerOptions, MetricsOptions, DpopOptions } from './config';
export type { DpopMode } from './express/require-bearer';
export type { AccessTokenAuth } from './core/verifier';
export type { IssuerHealth } from './core/issuer-health';
export type { AccessTokenClaims } from './core/issuer';
export type { ClientInfo, IssuedCredentials, CreateClientInput, ClientService, DeliverOptions } from './core/clients';
export { SecretRotationConflictError } from './core/clients';
export type { SigningAlgorithm, PublicJwk } from './core/keys';
export { KeyRotationConflictError, KeyRevocationUnsupportedError, UnknownSigningKeyError } from './core/keys';
export type { RegisteredKeyClient, CreateKeyClientInput, ClientChanges, ClientUpdate } from './core/clients';
export { signClientAssertion, CLIENT_ASSERTION_TYPE } from './jwt/client-assertion';
export type { ClientAssertionInput } from './jwt/client-assertion';
export { openEmbeddedStore } from './stores/embedded';
export type { EmbeddedStore } from './stores/embedded';
export { openStore } from './stores/open';
export type { OpenStoreOptions } from './stores/open';
export type { ClientStore, KeyStore, Store, ClientRecord, NewClient, StoredKey, StoredSecret } from './stores/types';
export type { ClientAuthKind, ClientJwks, ClientPublicJwk, AddClientKeyResult, ClientSettings, ClientSettingsChange, StoredClientChanges } from './stores/types';
export type { Logger } from './logger';
export type { TokenRejectionReason, TokenRejectionFacts } from './errors';
export {
  OAuthError,
  InvalidRequestError,
  InvalidClientError,
  UnauthorizedClientError,
  UnsupportedGrantTypeError,
  InvalidScopeError,
  InvalidTokenError,
  InsufficientScopeError,
  MissingTokenError,
  ServerError,
  TemporarilyUnavailableError,
  TooManyRequestsError,
  StoreUnavailableError,
  InvalidDpopProofError,
  UseDpopNonceError,
} from './errors';
export type { JsonWebKey, JwkInput } from './jwt/jwk';
