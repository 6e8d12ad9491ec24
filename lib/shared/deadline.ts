/**
 * A time limit on a call to a service that may stop answering without
 * closing its connection (a stalled Redis or database): the call's promise
 * is left to settle whenever it does, and the caller goes on without it.
 */

/** Rejects with `onTimeout()` after `ms` unless `promise` settles first; the timer never keeps the process alive. */
export function withDeadline<T>(promise: Promise<T>, ms: number, onTimeout: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(onTimeout()), ms);
    timer.unref();
  });
  // the call may still fail after the deadline: nobody is left to hear it
  promise.catch(() => undefined);
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
