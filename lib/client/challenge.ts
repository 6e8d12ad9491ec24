/**
 * The `error` of one scheme's challenge in a `WWW-Authenticate` header
 * (RFC 9110 §11.6.1, RFC 6750 §3). Returns `null` when the header has no
 * challenge of `scheme`, `undefined` when it has one without `error`.
 */
const ITEM = /\s*,?\s*([!#$%&'*+\-.^_`|~0-9A-Za-z]+)(?:\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,"]*))?/gy;

export function challengeError(header: string, scheme: string): string | undefined | null {
  const wanted = scheme.toLowerCase();
  let inScheme = false;
  let found = false;
  let error: string | undefined;
  ITEM.lastIndex = 0;
  for (let m = ITEM.exec(header); m !== null && m[0] !== ''; m = ITEM.exec(header)) {
    const [, name, value] = m;
    if (value === undefined) {
      // a token without "=": the next challenge's scheme (or a token68, which only follows a scheme)
      if (found && inScheme) break;
      inScheme = name.toLowerCase() === wanted;
      found = found || inScheme;
      // "Bearer token68" is not how RFC 6750 challenges look; skip a token68 after the scheme
      const after = header.slice(ITEM.lastIndex);
      const t68 = /^ +[A-Za-z0-9\-._~+/]+=*(?=\s*(,|$))/.exec(after);
      if (t68 && !/^ +[!#$%&'*+\-.^_`|~0-9A-Za-z]+\s*=/.test(after)) ITEM.lastIndex += t68[0].length;
    } else if (inScheme && name.toLowerCase() === 'error') {
      error = value.startsWith('"') ? value.slice(1, -1).replace(/\\(.)/g, '$1') : value;
    }
  }
  return found ? error : null;
}
