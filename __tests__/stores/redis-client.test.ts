/**
 * What the gate of a Redis client reads of the client (lib/stores/redis-client.ts), on real ioredis
 * objects (never connected: lazyConnect) and on the shapes of node-redis's, which is not installed here.
 */
import Redis, { Cluster } from 'ioredis';
import { redisServiceClient } from '../../lib/stores/redis-client';

describe('redisServiceClient', () => {
  it('an ioredis Cluster is many connections (never held back); an ioredis Redis is one', () => {
    const cluster = new Cluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
    const redis = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true });
    try {
      expect(redisServiceClient(cluster).oneConnection).toBe(false);
      expect(redisServiceClient(redis).oneConnection).toBe(true);
      // node-redis's cluster has getSlotMaster(), its client not
      expect(redisServiceClient({ getSlotMaster: () => undefined, isReady: true }).oneConnection).toBe(false);
      expect(redisServiceClient({ isReady: true }).oneConnection).toBe(true);
    } finally {
      cluster.disconnect();
      redis.disconnect();
    }
  });

  it("connected: ioredis's status 'ready', node-redis's isReady; anything else is taken as connected", () => {
    const redis = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true });
    try {
      expect(redis.status).toBe('wait');
      expect(redisServiceClient(redis).connected()).toBe(false);
      expect(redisServiceClient({ status: 'ready' }).connected()).toBe(true);
      expect(redisServiceClient({ status: 'reconnecting' }).connected()).toBe(false);
      expect(redisServiceClient({ isReady: false }).connected()).toBe(false);
      expect(redisServiceClient({ isReady: true }).connected()).toBe(true);
      expect(redisServiceClient({}).connected()).toBe(true);
    } finally {
      redis.disconnect();
    }
  });
});
