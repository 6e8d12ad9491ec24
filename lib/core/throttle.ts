/**
 * Calls `fn` at most once per `ms`: the first call goes through, then the
 * first one after each pause of `ms`; the others are dropped. For the warn
 * line of an outage that every request would otherwise repeat.
 */
export function atMostEvery<A extends unknown[]>(ms: number, fn: (...args: A) => void, now: () => number = Date.now): (...args: A) => void {
  let last = Number.NEGATIVE_INFINITY;
  return (...args) => {
    const t = now();
    if (t - last < ms) return;
    last = t;
    fn(...args);
  };
}

/**
 * Windows of `ms` per key, for a log line an outsider can repeat at will: the
 * first call for a key in a window opens it and answers how many calls the
 * previous window held back (log it at the usual level, with that count);
 * the others in the window answer `undefined` (log them at debug). At most
 * `max` keys are kept (the oldest window goes first), so keys an outsider
 * chooses (its address, a client_id) cost bounded memory.
 */
export class LogWindows<K> {
  private readonly windows = new Map<K, { startedAt: number; heldBack: number }>();

  constructor(
    private readonly ms = 60_000,
    private readonly now: () => number = Date.now,
    private readonly max = 10_000,
  ) {}

  take(key: K): number | undefined {
    const now = this.now();
    const window = this.windows.get(key);
    if (window && now - window.startedAt < this.ms) {
      window.heldBack++;
      return undefined;
    }
    // a new window goes to the end: the first key in the map is the oldest window
    this.windows.delete(key);
    if (this.windows.size >= this.max) this.windows.delete(this.windows.keys().next().value as K);
    this.windows.set(key, { startedAt: now, heldBack: 0 });
    return window ? window.heldBack : 0;
  }
}
