/** How long a Redis command may take before the caller goes on without it. */
export const REDIS_DEADLINE_MS = 1000;
