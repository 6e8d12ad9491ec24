/**
 * Someone else's text on one visible line: what a log or a message repeats
 * of a request, a token, a token endpoint's answer or a store's error. One
 * helper for the server (log fields of refused requests) and the token
 * client (its error messages and events). No I/O, importable by every layer.
 */

/**
 * Control characters (C0, DEL, C1) and the Unicode line and paragraph
 * separators: a log that prints the text would start a new line at some of
 * them, so the text could forge lines of a log. Also the bidirectional
 * controls (marks, embeddings, overrides, isolates: U+061C, U+200E, U+200F,
 * U+202A to U+202E, U+2066 to U+2069): a terminal or log viewer shows the
 * text after them in another order than it has. pino escapes the C0
 * controls in its JSON, not the others.
 */
const CONTROLS = /[\p{Cc}\p{Bidi_Control}\u2028\u2029]/gu;
const HAS_CONTROL = /[\p{Cc}\p{Bidi_Control}\u2028\u2029]/u;
const SHORT_ESCAPES: Record<string, string> = { '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/**
 * `text` with each control character written as an escape (`\n`, `\r`,
 * `\t`, else `\uXXXX`, as JSON writes them): the text still shows, on one
 * line. Applied again, it changes nothing.
 */
export function visible(text: string): string {
  // the usual text has none: tested first, so it is returned without a copy
  if (!HAS_CONTROL.test(text)) return text;
  return text.replace(CONTROLS, (c) => SHORT_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** `text` cut to `max` characters with `ellipsis` when longer (never half a surrogate pair). */
export function clip(text: string, max: number, ellipsis = '…'): string {
  if (text.length <= max) return text;
  const code = text.charCodeAt(max - 1);
  return `${text.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max)}${ellipsis}`;
}

/** `text` cut to `max` characters (see clip()), then every control character escaped (see visible()). */
export function echoed(text: string, max: number, ellipsis = '…'): string {
  return visible(clip(text, max, ellipsis));
}

/**
 * A log line with visible() applied to its string values and to the strings
 * of its array values (one level: what refusal lines hold), the others as
 * they are. The line itself is returned when nothing needed escaping.
 */
export function visibleFields<T extends Record<string, unknown>>(line: T): T {
  let out: Record<string, unknown> | undefined;
  for (const key of Object.keys(line)) {
    const value = line[key];
    let shown: unknown = value;
    if (typeof value === 'string') shown = visible(value);
    else if (Array.isArray(value) && value.some((v) => typeof v === 'string' && HAS_CONTROL.test(v))) shown = value.map((v: unknown) => (typeof v === 'string' ? visible(v) : v));
    if (shown !== value) (out ??= { ...line })[key] = shown;
  }
  return (out ?? line) as T;
}
