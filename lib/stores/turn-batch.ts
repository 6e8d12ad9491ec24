/**
 * Gathers the calls of one event-loop turn and hands them to `write` together
 * at setImmediate (the requests that arrived together share one commit);
 * `write` answers one result per item, in order, or throws (or rejects) and
 * every call of the turn is refused with that error.
 */
export class TurnBatch<T, R> {
  private pending: { item: T; resolve: (r: R) => void; reject: (err: unknown) => void }[] = [];

  constructor(private readonly write: (items: T[]) => R[] | Promise<R[]>) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      if (this.pending.push({ item, resolve, reject }) === 1) setImmediate(() => void this.flush());
    });
  }

  /** Writes what is pending now (close() calls it so that accepted calls are answered); a no-op when nothing is. */
  async flush(): Promise<void> {
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    let results: R[];
    try {
      results = await this.write(batch.map((p) => p.item));
    } catch (err) {
      for (const p of batch) p.reject(err);
      return;
    }
    for (let i = 0; i < batch.length; i++) batch[i].resolve(results[i]);
  }
}
