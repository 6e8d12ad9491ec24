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
