/**
 * A JSON Web Key (RFC 7517) as JSON: the members this package reads, any
 * other kept as it is. The package's own type, so that its declarations do
 * not depend on which `@types/node` a project installs (newer ones no longer
 * export `JsonWebKey` from `node:crypto`).
 */
export interface JsonWebKey {
  kty?: string;
  crv?: string;
  x?: string;
  y?: string;
  d?: string;
  n?: string;
  e?: string;
  p?: string;
  q?: string;
  dp?: string;
  dq?: string;
  qi?: string;
  k?: string;
  kid?: string;
  alg?: string;
  use?: string;
  key_ops?: string[];
  ext?: boolean;
  [member: string]: unknown;
}

/**
 * A JWK as a caller hands it in (a private key for private_key_jwt or DPoP,
 * a public key to register): any object with these members. It has no index
 * signature, so Node's own `JsonWebKey` (`keyObject.export({ format: 'jwk' })`)
 * fits whichever `@types/node` declares it, with or without one, and so does
 * parsed JSON.
 */
export interface JwkInput {
  kty?: string | undefined;
  crv?: string | undefined;
  x?: string | undefined;
  y?: string | undefined;
  d?: string | undefined;
  n?: string | undefined;
  e?: string | undefined;
  p?: string | undefined;
  q?: string | undefined;
  dp?: string | undefined;
  dq?: string | undefined;
  qi?: string | undefined;
  k?: string | undefined;
  kid?: string | undefined;
  alg?: string | undefined;
  use?: string | undefined;
  key_ops?: string[] | undefined;
  ext?: boolean | undefined;
}
