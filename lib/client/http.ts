/** Small HTTP helpers of the client side: timeouts, Retry-After, URLs, capped bodies. */
import { readCapped } from '../shared/http-body';

export type FetchLike = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/**
 * A signal that aborts after `ms` or when `parent` aborts. The timer is
 * unref()'d: it never keeps a process alive. Call `done()` when finished.
 */
export function deadline(ms: number, parent: AbortSignal): { signal: AbortSignal; timedOut(): boolean; done(): void } {
  const controller = new AbortController();
  let expired = false;
  const timer = setTimeout(() => {
    expired = true;
    controller.abort(new Error('timeout'));
  }, ms);
  timer.unref();
  const onAbort = (): void => controller.abort(parent.reason);
  if (parent.aborted) onAbort();
  else parent.addEventListener('abort', onAbort, { once: true });
  return {
    signal: controller.signal,
    timedOut: () => expired,
    done() {
      clearTimeout(timer);
      parent.removeEventListener('abort', onAbort);
    },
  };
}

/**
 * Seconds from a `Retry-After` header (delay-seconds or HTTP-date), at most
 * one hour; `undefined` when absent or unreadable. An HTTP-date counts from
 * the answer's own `Date` header when it has a readable one (RFC 9110
 * §10.2.3), so a server whose clock differs from ours gets the wait it asked
 * for; else from `now`. A date already past is 0.
 */
export function retryAfterSeconds(value: string | null, now: number, date?: string | null): number | undefined {
  if (value === null) return undefined;
  const text = value.trim();
  let seconds: number;
  if (/^\d+$/.test(text)) seconds = Number(text);
  else {
    const at = Date.parse(text);
    if (Number.isNaN(at)) return undefined;
    const sent = date == null ? NaN : Date.parse(date);
    seconds = Math.max(0, Math.ceil((at - (Number.isNaN(sent) ? now : sent)) / 1000));
  }
  return Math.min(seconds, 3600);
}

/** http: to a loopback host (localhost, 127.0.0.0/8, ::1) is allowed without TLS. */
export function isLoopbackHost(hostname: string): boolean {
  // not *.localhost: only a resolver with nss-myhostname (or the like) keeps those on loopback; others ask DNS
  return hostname === 'localhost' || hostname === '[::1]' || hostname === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(hostname);
}

/** Throws a TypeError for a URL a credential must not be sent to; returns the parsed URL (`undefined` for an https: string). */
export function checkTransport(url: string, allowInsecureHttp: boolean, what: string): URL | undefined {
  if (url.startsWith('https://')) return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`${what}: not a URL`);
  }
  if (parsed.protocol === 'https:') return parsed;
  if (parsed.protocol === 'http:' && (allowInsecureHttp || isLoopbackHost(parsed.hostname))) return parsed;
  const err = new TypeError(`${what}: refusing to send a credential to ${parsed.protocol}//${parsed.host} over plain HTTP (set allowInsecureHttp to allow it)`);
  (err as TypeError & { code: string }).code = 'ERR_INSECURE_HTTP';
  throw err;
}

/**
 * `checkTransport()` that remembers the last few origins it allowed: a URL
 * string that begins with one of them followed by `/` (so its host can only
 * be that one) is allowed without being parsed again.
 */
export function transportChecker(allowInsecureHttp: boolean, what: string, remember = 8): (url: string) => void {
  const allowed: string[] = [];
  return (url) => {
    if (url.startsWith('https://')) return;
    for (let i = 0; i < allowed.length; i++) if (url.startsWith(allowed[i])) return;
    const parsed = checkTransport(url, allowInsecureHttp, what);
    if (parsed === undefined || parsed.host === '') return;
    if (allowed.length === remember) allowed.shift();
    allowed.push(`${parsed.protocol}//${parsed.host}/`);
  };
}

/** The most a token or metadata answer may hold: a real one is a few KiB. */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/**
 * Reads a JSON object body; `undefined` when the body is not one. Throws
 * `tooLarge` past MAX_ANSWER_BYTES, and the read's own error when the body
 * breaks off (a connection reset, or a timeout or close() aborting the
 * read): that is a failed request, not an answer that holds nothing.
 */
export async function readJsonObject(response: Response): Promise<Record<string, unknown> | undefined> {
  const text = await readCapped(response, MAX_ANSWER_BYTES, answerTooLarge);
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

export class AnswerTooLargeError extends Error {}

function answerTooLarge(maxBytes: number): Error {
  return new AnswerTooLargeError(`the answer is larger than ${maxBytes / 1024} KiB`);
}

/**
 * Why a request got no answer, from the error fetch threw (whose own message
 * is just "fetch failed"): the system error's code and address, found down
 * its causes, e.g. `ECONNREFUSED 127.0.0.1:3000`; `undefined` when none says.
 */
export function networkReason(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const { code, address, port, hostname, cause } = e as { code?: unknown; address?: unknown; port?: unknown; hostname?: unknown; cause?: unknown };
    if (typeof code === 'string' && /^[A-Z][A-Z0-9_]+$/.test(code) && code !== 'ERR_TOKEN_ENDPOINT') {
      const host = typeof address === 'string' ? address : typeof hostname === 'string' ? hostname : undefined;
      return host === undefined ? code : `${code} ${host}${typeof port === 'number' ? `:${port}` : ''}`;
    }
    e = cause;
  }
  return undefined;
}
