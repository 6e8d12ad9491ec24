/**
 * Resolves once `condition()` holds, asking every 5 ms; rejects after
 * `timeoutMs`. For timers under test (probes, polls): a busy machine runs a
 * 20 ms timer late, so a fixed sleep followed by a count fails for no reason.
 */
export async function until(condition: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${condition.toString()}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
