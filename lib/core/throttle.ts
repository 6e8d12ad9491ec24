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
 * the others in the window answer `undefined` (log them at debug), and the
 * window keeps the last one's `held` value. ended() hands over the windows
 * that are over with calls held back, so their count can be told without
 * waiting for the key's next call. At most `max` keys are kept (the oldest
 * window goes first), so keys an outsider chooses (its address, a
 * client_id) cost bounded memory; windows over that held nothing back are
 * dropped as new ones open, so keys seen once are not kept that long.
 */
export class LogWindows<K, H = undefined> {
  private readonly windows = new Map<K, { startedAt: number; heldBack: number; last?: H }>();
  /** Windows holding back at least one call. */
  private holdingCount = 0;

  constructor(
    private readonly ms = 60_000,
    private readonly now: () => number = Date.now,
    private readonly max = 10_000,
  ) {}

  take(key: K, held?: H): number | undefined {
    const now = this.now();
    const window = this.windows.get(key);
    if (window && now - window.startedAt < this.ms) {
      if (window.heldBack++ === 0) this.holdingCount++;
      window.last = held;
      return undefined;
    }
    // a new window goes to the end: the first key in the map is the oldest window
    if (window) this.remove(key, window);
    this.dropQuietEnded(now);
    if (this.windows.size >= this.max) {
      const oldest = this.windows.keys().next().value as K;
      this.remove(oldest, this.windows.get(oldest)!);
    }
    this.windows.set(key, { startedAt: now, heldBack: 0 });
    return window ? window.heldBack : 0;
  }

  /** Whether `key` has a window that is not over (its next take() answers undefined). */
  isOpen(key: K): boolean {
    const window = this.windows.get(key);
    return window !== undefined && this.now() - window.startedAt < this.ms;
  }

  /** Whether some window holds back a call (ended() may have something to hand over). */
  holding(): boolean {
    return this.holdingCount > 0;
  }

  /**
   * Removes the windows that are over and hands over those that held calls
   * back: their key, how many, and the last one's `held` value. The key's
   * next call opens a new window at the usual level, counting 0.
   */
  ended(): { key: K; heldBack: number; last: H | undefined }[] {
    const now = this.now();
    const over: { key: K; heldBack: number; last: H | undefined }[] = [];
    for (const [key, window] of this.windows) {
      if (now - window.startedAt < this.ms) continue;
      if (window.heldBack > 0) over.push({ key, heldBack: window.heldBack, last: window.last });
      this.remove(key, window);
    }
    return over;
  }

  /**
   * Removes the oldest windows while they are over and held nothing back
   * (nothing is owed for them, and their key's next call opens a window as
   * if they were gone), so keys seen once each (an address per request) are
   * not kept until `max` pushes them out. Stops at the first window still
   * open or holding calls back (ended() hands that one over): each window is
   * removed once, so a take() costs this no more than a constant on average.
   */
  private dropQuietEnded(now: number): void {
    for (const [key, window] of this.windows) {
      if (now - window.startedAt < this.ms || window.heldBack > 0) return;
      this.windows.delete(key);
    }
  }

  private remove(key: K, window: { heldBack: number }): void {
    if (window.heldBack > 0) this.holdingCount--;
    this.windows.delete(key);
  }
}
