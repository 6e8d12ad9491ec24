import type { IssuerConfig } from '../config';
import { DPOP_ALGORITHMS } from '../jwt/algorithms';

/** RFC 8414 authorization server metadata, built from the configuration only. */
export function authorizationServerMetadata(config: IssuerConfig): Record<string, unknown> {
  const metadata: Record<string, unknown> = {
    issuer: config.issuer,
    token_endpoint: config.tokenEndpoint,
    jwks_uri: config.jwksUri,
    grant_types_supported: ['client_credentials'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    token_endpoint_auth_signing_alg_values_supported: [...DPOP_ALGORITHMS],
    response_types_supported: [],
    dpop_signing_alg_values_supported: [...DPOP_ALGORITHMS],
    revocation_endpoint: config.revocationEndpoint,
    revocation_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    revocation_endpoint_auth_signing_alg_values_supported: [...DPOP_ALGORITHMS],
    introspection_endpoint: config.introspectionEndpoint,
    introspection_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
    introspection_endpoint_auth_signing_alg_values_supported: [...DPOP_ALGORITHMS],
    // not registered with IANA: this package's signed list of revocations for verifiers that check tokens locally
    revocation_list_uri: config.revocationListUri,
  };
  if (config.scopesSupported.length > 0) metadata.scopes_supported = config.scopesSupported;
  return metadata;
}

/**
 * Where RFC 8414 §3.1 puts the metadata of `issuer`, as a path on its host:
 * the well-known segment between the host and the issuer's path (without a
 * terminating "/"), e.g. `/.well-known/oauth-authorization-server/auth` for
 * `https://example.com/auth`.
 */
export function metadataPath(issuer: string): string {
  const path = new URL(issuer).pathname.replace(/\/+$/, '');
  return `/.well-known/oauth-authorization-server${path}`;
}
