/**
 * RFC 3986 §6.2.2 / §6.2.3 normalisation of a DPoP `htu` (RFC 9449 §4.3):
 * scheme and host lower-case, default port dropped, empty path "/", dot
 * segments removed (all by the WHATWG URL parser), then percent-encodings
 * of unreserved characters decoded and the others' hex digits upper-cased.
 * Query and fragment are dropped. Returns `undefined` for anything but an
 * absolute http(s) URL, and for one with userinfo (`user:pw@`, even empty):
 * normalisation keeps it, and no request URI has one, so it never matches.
 */
export function normalizeHtu(value: string): string | undefined {
  if (!PLAIN_HTTP_URL.test(value)) return undefined;
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return undefined;
  }
  if ((url.protocol !== 'https:' && url.protocol !== 'http:') || url.hostname === '' || url.username !== '' || url.password !== '') return undefined;
  const path = url.pathname.includes('%') ? url.pathname.replace(PERCENT_ENCODED, normalizePercent) : url.pathname;
  return `${url.protocol}//${url.host}${path}`;
}

/** Normalised forms of recent `htu`s: clients call the same few URLs, and parsing one costs a URL object. */
const normalized = new Map<string, string | undefined>();
const NORMALIZED_MAX = 1000;

/** normalizeHtu(), remembered for the last 1,000 distinct values (emptied when full). */
export function normalizeHtuCached(value: string): string | undefined {
  const known = normalized.get(value);
  if (known !== undefined || normalized.has(value)) return known;
  const result = normalizeHtu(value);
  if (value.length <= 2048) {
    if (normalized.size >= NORMALIZED_MAX) normalized.clear();
    normalized.set(value, result);
  }
  return result;
}

/**
 * What a client writes: `http(s)://`, an authority without userinfo, then a
 * path (or nothing), with no whitespace or control character in any of
 * them; the query and fragment, which the comparison drops, are not looked
 * at. The URL parser would take far more (spaces around it, tabs and
 * newlines inside, backslashes, `https:host`, `https:///@host`) and drop an
 * empty userinfo without a trace, so such spellings are refused before it.
 */
const PLAIN_HTTP_URL = /^https?:\/\/[^/?#@\\\s\x00-\x1f\x7f]+(?:\/[^?#\s\x00-\x1f\x7f]*)?(?:[?#][\s\S]*)?$/i;
const PERCENT_ENCODED = /%[0-9A-Fa-f]{2}/g;
const UNRESERVED = /[A-Za-z0-9\-._~]/;

function normalizePercent(encoded: string): string {
  const char = String.fromCharCode(parseInt(encoded.slice(1), 16));
  return UNRESERVED.test(char) ? char : encoded.toUpperCase();
}

/**
 * The `htu` a request must carry: the configured public base URL (scheme,
 * host, and any path prefix a proxy strips) followed by the path the app
 * saw (`req.originalUrl`, so a router mounted under a prefix works). Built
 * by concatenation, never by resolving the path against the base: a path
 * such as `//evil.test/x` stays a path on the configured host. The request's
 * `Host` and `X-Forwarded-*` headers play no part.
 */
export function requestHtu(publicBaseUrl: string, originalUrl: string): string {
  const base = publicBaseUrl.endsWith('/') ? publicBaseUrl.replace(/\/+$/, '') : publicBaseUrl;
  if (originalUrl.startsWith('/')) return base + originalUrl;
  // the absolute form (RFC 9112 §3.2.2: a server must accept it; a client sends it through a forward proxy that
  // passes it on): Express routes it by its path, and so is its htu built, on the configured host like any other
  const authority = ABSOLUTE_FORM.exec(originalUrl);
  const path = authority ? originalUrl.slice(authority[0].length) : originalUrl;
  return path.startsWith('/') ? base + path : `${base}/${path}`;
}

/** The scheme and authority of an absolute-form request target. */
const ABSOLUTE_FORM = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/;
