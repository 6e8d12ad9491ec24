/**
 * A read that must begin after the caller's call, where a read already under
 * way may have begun before the change the caller knows of (its own write,
 * another instance's ring): `run(current, start)` starts one at once when
 * none runs, else one more once the current one ends, shared by everyone
 * who asks meanwhile. KeyRing.reload() and RemoteJwks's list-driven fetches
 * use it.
 */
export class FollowUp {
  private next: Promise<void> | undefined;

  run(current: Promise<unknown> | undefined, start: () => Promise<void>): Promise<void> {
    if (!current) return start();
    this.next ??= current
      .catch(() => undefined)
      .then(() => {
        this.next = undefined;
        return start();
      });
    return this.next;
  }
}
