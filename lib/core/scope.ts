/** Scope grammar of RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), separated by single spaces. */
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/;

export function isScopeToken(token: string): boolean {
  return SCOPE_TOKEN.test(token);
}

/**
 * Parses a `scope` parameter. Returns the distinct tokens in order, or `null`
 * when the value breaks the grammar (empty token, double or edge spaces,
 * characters outside the allowed set).
 */
export function parseScope(value: string): string[] | null {
  const tokens = value.split(' ');
  for (const token of tokens) if (!SCOPE_TOKEN.test(token)) return null;
  return [...new Set(tokens)];
}

export function formatScope(scopes: readonly string[]): string {
  return scopes.join(' ');
}

/** Normalises a scope option given as "a b" or ["a", "b"]; throws TypeError when malformed. */
export function scopeOption(name: string, value: unknown): string[] {
  if (value === undefined) return [];
  const list = typeof value === 'string' ? (value === '' ? [] : value.split(' ')) : value;
  if (!Array.isArray(list) || !list.every((s) => typeof s === 'string' && SCOPE_TOKEN.test(s))) {
    throw new TypeError(`option ${name} must be a space-separated string or an array of scope tokens (RFC 6749 §3.3)`);
  }
  return [...new Set(list as string[])];
}

/** Scopes in `required` that `granted` lacks. */
export function missingScopes(granted: readonly string[], required: readonly string[]): string[] {
  return required.filter((s) => !granted.includes(s));
}
