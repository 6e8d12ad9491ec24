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
