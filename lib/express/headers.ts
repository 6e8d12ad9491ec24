/**
 * Whether the request has more than one Authorization header line. Node keeps
 * only the first in `req.headers`, so a proxy that reads the last would see
 * another identity than the one checked here (RFC 9110 §5.3: Authorization
 * is not a list); both the token endpoints and requireBearer() refuse it.
 */
export function repeatedAuthorization(raw: string[]): boolean {
  let seen = false;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i];
    // the usual spellings compared as they are: toLowerCase() costs more than the rest of the loop
    if (name.length === 13 && (name === 'Authorization' || name === 'authorization' || name.toLowerCase() === 'authorization')) {
      if (seen) return true;
      seen = true;
    }
  }
  return false;
}
