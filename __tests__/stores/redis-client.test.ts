/**
 * What the gate of a Redis client reads of the client (lib/stores/redis-client.ts), on real ioredis
 * objects (never connected: lazyConnect) and on the shapes of node-redis's, which is not installed here.
 */
import Redis, { Cluster, ReplyError } from 'ioredis';
import { isClientTimeout, isErrorReply, isNodeRedis, redisServiceClient } from '../../lib/stores/redis-client';

// node-redis 5+'s (packages/client/lib/errors.ts): no `name` of their own, so 'Error'
class ErrorReply extends Error {}
class SimpleError extends ErrorReply {}
class BlobError extends ErrorReply {}
class TimeoutError extends Error {}
class CommandTimeoutDuringMaintenanceError extends TimeoutError {}

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

  it("Redis's error replies: ioredis's ReplyError, node-redis's ErrorReply and the SimpleError and BlobError it answers with", () => {
    expect(isErrorReply(new ReplyError('NOPERM no permissions'))).toBe(true);
    expect(new SimpleError('NOPERM').name).toBe('Error');
    expect(isErrorReply(new SimpleError('NOPERM'))).toBe(true);
    expect(isErrorReply(new BlobError('ERR'))).toBe(true);
    expect(isErrorReply(new ErrorReply('ERR'))).toBe(true);
    expect(isErrorReply(new Error('Connection is closed.'))).toBe(false);
    expect(isErrorReply(new TypeError('x is not a function'))).toBe(false);
    expect(isErrorReply({ name: 'ReplyError' })).toBe(false);
  });

  it("the client's own timeouts: ioredis's commandTimeout, node-redis's TimeoutError and what extends it", () => {
    expect(isClientTimeout(new Error('Command timed out'))).toBe(true);
    expect(isClientTimeout(new TimeoutError())).toBe(true);
    expect(isClientTimeout(new CommandTimeoutDuringMaintenanceError())).toBe(true);
    expect(isClientTimeout(new Error('connect ECONNREFUSED 127.0.0.1:1'))).toBe(false);
    expect(isClientTimeout(new SimpleError('ERR'))).toBe(false);
  });

  it('node-redis (isOpen, no defineCommand) is told from ioredis', () => {
    const redis = new Redis({ host: '127.0.0.1', port: 1, lazyConnect: true });
    try {
      expect(isNodeRedis(redis)).toBe(false);
      expect(isNodeRedis({ isOpen: false, isReady: false })).toBe(true);
      expect(isNodeRedis(null)).toBe(false);
      expect(isNodeRedis({})).toBe(false);
    } finally {
      redis.disconnect();
    }
  });
});
