/**
 * The DPoP replay store and the revocation push speak ioredis: a node-redis
 * client given there is refused when the issuer (or the standalone
 * middleware) is made, not taken and misused. node-redis's
 * set(key, value, options) would take ioredis's ('PX', ttl, 'NX') for
 * nothing: every replayed proof accepted, no key ever expiring. Its
 * subscribe() wants a listener per channel where ioredis emits 'message':
 * no push would ever arrive. (The brute-force counters take either.)
 */
import { createIssuer, requireBearer } from '../../lib';
import { AUDIENCE, ISSUER } from '../helpers/app';

/** What tells a node-redis client (4+) from an ioredis one: `isOpen`, and no `defineCommand`. */
const nodeRedisLike = () => ({
  isOpen: true,
  isReady: true,
  set: async () => 'OK',
  publish: async () => 0,
  duplicate: () => nodeRedisLike(),
  on: () => undefined,
});

/** The same calls on an ioredis-shaped client. */
const ioredisLike = () => ({ ...nodeRedisLike(), isOpen: undefined, defineCommand: () => undefined, status: 'ready' });

describe('a node-redis client where ioredis is needed', () => {
  it('dpop.redis of createIssuer(): TypeError naming the option; an ioredis-shaped client is taken', () => {
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, dpop: { redis: nodeRedisLike() } })).toThrow(
      /^option dpop\.redis must be an ioredis client, not a node-redis one/,
    );
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, dpop: { redis: ioredisLike() } })).not.toThrow();
  });

  it('dpopProofs.redis of a standalone requireBearer(): TypeError naming the option', () => {
    const standalone = (redis: unknown) => () => requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: 'http://127.0.0.1:9/jwks', logger: false, dpopProofs: { redis } });
    expect(standalone(nodeRedisLike())).toThrow(/dpop(Proofs)?\.redis must be an ioredis client, not a node-redis one/);
    expect(standalone(ioredisLike())).not.toThrow();
  });

  it('revocationPush.redis: TypeError naming the option', () => {
    expect(() => createIssuer({ issuer: ISSUER, audience: AUDIENCE, logger: false, revocationPush: { redis: nodeRedisLike() } })).toThrow(
      /^option revocationPush\.redis must be an ioredis client, not a node-redis one$/,
    );
  });
});
