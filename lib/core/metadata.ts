import type { IssuerConfig } from '../config';

/** RFC 8414 authorization server metadata, built from the configuration only. */
export function authorizationServerMetadata(config: IssuerConfig): Record<string, unknown> {
  const metadata: Record<string, unknown> = {
    issuer: config.issuer,
    token_endpoint: config.tokenEndpoint,
    jwks_uri: config.jwksUri,
    grant_types_supported: ['client_credentials'],
    token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
    response_types_supported: [],
  };
  if (config.scopesSupported.length > 0) metadata.scopes_supported = config.scopesSupported;
  return metadata;
}
