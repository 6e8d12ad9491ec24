/**
 * Redis for tests: where it is and whether it is reachable (a synchronous
 * probe, because jest `describe` bodies are sync).
 */
import { spawnSync } from 'node:child_process';
import { describeIfReachable } from './services';

export function redisUrl(): string {
  return process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
}

let probed: boolean | undefined;

export function redisReachableSync(): boolean {
  if (probed !== undefined) return probed;
  const script = `
    const Redis = require(process.env.ECC_REDIS_MODULE);
    const r = new Redis(process.env.ECC_REDIS_URL, { lazyConnect: true, connectTimeout: 2000, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.connect().then(() => r.ping()).then(() => r.quit()).then(() => process.exit(0), () => process.exit(1));`;
  const result = spawnSync(process.execPath, ['-e', script], {
    env: { ...process.env, ECC_REDIS_MODULE: require.resolve('ioredis'), ECC_REDIS_URL: redisUrl() },
    timeout: 3000,
    stdio: 'ignore',
  });
  probed = result.status === 0;
  return probed;
}

/** `describe` when Redis is reachable (see describeIfReachable). */
export function describeIfRedis(title: string, fn: () => void): void {
  describeIfReachable('Redis', redisReachableSync(), redisUrl(), title, fn);
}
