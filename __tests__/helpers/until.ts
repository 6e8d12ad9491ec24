/**
 * Resolves once `check()` holds, asking every 5 ms; rejects after
 * `timeoutMs` naming `what`. For timers under test (probes, polls, renewals
 * in the background): a busy machine runs a 20 ms timer late, so a fixed
 * sleep followed by a count fails for no reason.
 */
export async function until(check: () => boolean, what = check.toString(), timeoutMs = 5000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
