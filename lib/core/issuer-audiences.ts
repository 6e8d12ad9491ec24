/**
 * RFC 8707 for one issuer: which resources (audiences) it serves, which
 * audience a token request gets, and one verifier per audience, all sharing
 * the issuer's keys and revocations.
 */
import type { IssuerConfig } from '../config';
import { InvalidTargetError } from '../errors';
import type { ClientRecord } from '../stores/types';
import type { KeyRing } from './keys';
import { parseResourceIndicator, ResourcePolicy } from './resources';
import type { RevocationCheck } from './revocation';
import { AccessTokenVerifier } from './verifier';

export class IssuerAudiences {
  /** The resources this issuer serves (`audience` the default); undefined when `audience` is not a URI and no resources are set. */
  private readonly resources: ResourcePolicy | undefined;
  /** Verifiers of requireBearer({ audience }) for resources other than the default, one per audience. */
  private readonly verifiers = new Map<string, AccessTokenVerifier>();
  private anyVerifier: AccessTokenVerifier | undefined;
  /** Every audience this issuer's tokens carry, the default first. */
  readonly list: string[];

  constructor(
    private readonly config: IssuerConfig,
    private readonly keys: KeyRing,
    private readonly revocation: RevocationCheck,
    private readonly now: () => number,
    /** The verifier of the default audience (the issuer's own). */
    private readonly defaultVerifier: AccessTokenVerifier,
  ) {
    this.resources = resourcePolicy(config);
    this.list = this.resources ? [config.audience, ...this.resources.list().filter((r) => r !== config.audience)] : [config.audience];
  }

  /**
   * The `aud` of a token for this client and its request's `resource`
   * (undefined when absent, a list when repeated): the default audience
   * without one, else the one resource asked for, if the issuer serves it
   * and the client may use it. InvalidTargetError otherwise.
   */
  audienceFor(client: ClientRecord, requested: string | string[] | undefined): string {
    if (this.resources) return this.resources.audienceFor(requested, client.resources);
    if (requested === undefined) return this.config.audience;
    if (Array.isArray(requested) && requested.length > 1) throw new InvalidTargetError('only one resource per token request');
    parseResourceIndicator(Array.isArray(requested) ? requested[0] : requested);
    throw new InvalidTargetError('the requested resource is not served by this issuer');
  }

  /** The resources a client may be registered for, as the issuer spells them; TypeError naming the first it does not serve. */
  clientResources(values: readonly string[]): string[] {
    if (values.length === 0) return [];
    if (!this.resources) throw new TypeError('this issuer serves no resources (RFC 8707): set the resources option, with an audience that is an absolute URI');
    return this.resources.clientResources(values);
  }

  /** The verifier for tokens of `audience`: the default one, or one per other resource (same keys, cache size and revocations). */
  verifierFor(audience: string | undefined): AccessTokenVerifier {
    if (audience === undefined || audience === this.config.audience) return this.defaultVerifier;
    if (!this.list.includes(audience)) throw new TypeError(`audience ${JSON.stringify(audience)} is not one of this issuer's resources: ${this.list.join(', ')}`);
    let verifier = this.verifiers.get(audience);
    if (!verifier) {
      verifier = this.verifier(audience, this.config.tokenCacheMax);
      this.verifiers.set(audience, verifier);
    }
    return verifier;
  }

  /**
   * Verifies tokens for introspection and revocation: this issuer's tokens
   * for any of its audiences, revocations applied (a revoked token is
   * inactive, and revoking it again changes nothing). Uncached.
   */
  get anyAudience(): AccessTokenVerifier {
    this.anyVerifier ??= this.verifier(this.list, 0);
    return this.anyVerifier;
  }

  private verifier(audience: string | string[], cacheMax: number): AccessTokenVerifier {
    return new AccessTokenVerifier({
      issuer: this.config.issuer,
      audience,
      keys: this.keys,
      clockTolerance: this.config.clockTolerance,
      cacheMax,
      now: this.now,
      revocation: this.revocation,
    });
  }
}

/** The resource policy of a configuration: none when the audience is not a URI and no resources are set. */
function resourcePolicy(config: IssuerConfig): ResourcePolicy | undefined {
  let notUri: string | undefined;
  try {
    parseResourceIndicator(config.audience);
  } catch (err) {
    notUri = (err as InvalidTargetError).description ?? 'it is not a resource indicator';
  }
  if (notUri !== undefined) {
    // the audience is at fault (it is the default resource), so the message names it, and why
    if (config.resources.length > 0) throw new TypeError(`option audience must be a resource indicator when there are resources (the audience is the default one): ${notUri.replace(/^resource /, '')}`);
    return undefined;
  }
  try {
    return new ResourcePolicy({ resources: config.resources, defaultResource: config.audience });
  } catch (err) {
    throw new TypeError(`option resources: ${(err as Error).message}`);
  }
}
