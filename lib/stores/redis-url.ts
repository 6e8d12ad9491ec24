/**
 * The CLI's REDIS_URL rule, the example servers' too (examples/env.ts keeps
 * its own copy: the examples import only the package's public API): redis:// or
 * rediss:// with a host, or a unix socket's absolute path (ioredis takes
 * both). Anything else is refused as a setting, not taken for an outage:
 * ioredis would read a malformed one as a socket path or the default
 * localhost:6379 and report only that the connection closed.
 */
export function checkRedisUrl(url: string, variable = 'REDIS_URL'): string {
  if ((url.startsWith('/') && !url.startsWith('//')) || (/^rediss?:\/\/[^/]/i.test(url) && URL.canParse(url))) return url;
  // without its user information (a password may hold '/' too): all from '//' to the last '@'
  throw new TypeError(`${variable} must be redis://… or rediss://… (or a unix socket's absolute path), got ${JSON.stringify(url.replace(/\/\/.*@/, '//…@'))}`);
}
