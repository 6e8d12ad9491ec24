/**
 * `value` as JSON for a message or a log line, when it came from outside (a
 * token's claims, a metadata document): a structure nested too deep for
 * JSON.stringify (a RangeError past some thousands of levels, which anyone can
 * send) gives `tooDeep` instead; `undefined` (nothing JSON can write) gives
 * String(value).
 */
export function safeJson(value: unknown, tooDeep: string): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return tooDeep;
  }
}
