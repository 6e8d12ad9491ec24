/**
 * What token.rejected's throttle (RejectionLog) holds after refusals of
 * unverified tokens from many addresses: the heap it keeps and the lines
 * written at info and above. For the figures of a change, not a test, not
 * part of `npm run bench`. Bounded: ADDRESSES (20,000) distinct IPv6 /64s,
 * each sending REPEAT (1) refused tokens for one reason, with fresh strings
 * as requests have (a claimed client_id, a `received` of 200 characters, a
 * `detail`), within one minute (a frozen clock) or spread evenly over
 * MINUTES. One scenario per process, so that nothing else is in the heap:
 *
 *   node --expose-gc -r ts-node/register/transpile-only bench/micro/rejection-log-memory.ts
 *   REPEAT=2 node --expose-gc -r ts-node/register/transpile-only bench/micro/rejection-log-memory.ts
 *   MINUTES=10 node --expose-gc -r ts-node/register/transpile-only bench/micro/rejection-log-memory.ts
 */
import { RejectionLog } from '../../lib/core/rejection-log';

const ADDRESSES = Number(process.env.ADDRESSES ?? 20_000);
const REPEAT = Number(process.env.REPEAT ?? 1);
const MINUTES = Number(process.env.MINUTES ?? 0);

if (typeof global.gc !== 'function') throw new Error('run with node --expose-gc');
const gc = global.gc as () => void;

function heap(): number {
  for (let i = 0; i < 4; i++) gc();
  return process.memoryUsage().heapUsed;
}

let lines = 0;
let clock = 1_000_000;
const count = (): void => void lines++;
const logger = { debug: () => undefined, info: count, warn: count, error: count };

function fill(log: RejectionLog, addresses: number, tag: string): void {
  for (let i = 0; i < addresses; i++) {
    clock = 1_000_000 + Math.floor((i * MINUTES * 60_000) / addresses);
    const ip = `2001:db8:${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}::${(i % 7) + 1}`;
    for (let r = 0; r < REPEAT; r++) {
      const received = `https://issuer-${tag}-${i}-${r}.example/`.padEnd(200, 'x');
      log.report('wrong_issuer', `iss ${received} is not http://issuer.test`, { expected: 'http://issuer.test', received, claimed_client_id: `client-${i}-${r}` }, { ip, method: 'GET', path: '/orders' });
    }
  }
}

/** Keeps the log reachable while measured. */
const held: { log?: RejectionLog } = {};

// the same code run once on a log thrown away, so that compiling it is not counted
fill(new RejectionLog(logger, 60_000, () => 0), 2_000, 'warm');
const before = heap();
lines = 0;
held.log = new RejectionLog(logger, 60_000, () => clock);
fill(held.log, ADDRESSES, 'load');
const after = heap();
// read from the inside (RejectionLog → ThrottledLog → LogWindows' map), as it is in this version and the one before
const windows = (held.log as unknown as { log: { windows: { windows: Map<unknown, unknown> } } }).log.windows.windows.size;
console.log(`${ADDRESSES} addresses x ${REPEAT} refusals${MINUTES ? ` over ${MINUTES} min` : ''}: ${((after - before) / 1024 / 1024).toFixed(2)} MB held by the throttle (${windows} windows), ${lines} lines at info`);
// its timer (running while lines are held back) is unref'd: the process ends
