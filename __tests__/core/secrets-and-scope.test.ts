import { parseBasic, readClientCredentials } from '../../lib/core/client-auth';
import { parseScope } from '../../lib/core/scope';
import { generateClientId, generateSecret, hashSecret, verifySecret } from '../../lib/core/secrets';

describe('secrets', () => {
  it('generates 256-bit secrets and 128-bit ids, all distinct', () => {
    const secrets = new Set(Array.from({ length: 1000 }, generateSecret));
    expect(secrets.size).toBe(1000);
    for (const s of secrets) expect(Buffer.from(s, 'base64url')).toHaveLength(32);
    const ids = Array.from({ length: 1000 }, generateClientId);
    expect(new Set(ids).size).toBe(1000);
    expect(ids.every((id) => Buffer.from(id, 'base64url').length === 16 && !id.startsWith('-'))).toBe(true);
  });

  it('stores a salted hash that verifies the secret and nothing else', () => {
    const secret = generateSecret();
    const a = hashSecret(secret);
    const b = hashSecret(secret);
    expect(a).not.toContain(secret);
    expect(a).not.toBe(b);
    expect(verifySecret(secret, a)).toBe(true);
    expect(verifySecret(secret, b)).toBe(true);
    expect(verifySecret(secret + 'x', a)).toBe(false);
    expect(verifySecret('', a)).toBe(false);
  });

  it('treats a malformed stored hash as a mismatch', () => {
    expect(verifySecret('s', 'plain')).toBe(false);
    expect(verifySecret('s', 'hmac-sha256$only-salt')).toBe(false);
    expect(verifySecret('s', 'bcrypt$a$b')).toBe(false);
    expect(verifySecret('s', 'hmac-sha256$AAAA$AAAA')).toBe(false);
  });
});

describe('client credentials', () => {
  const b64 = (s: string) => Buffer.from(s).toString('base64');

  it('form-decodes Basic parts and splits at the first colon', () => {
    expect(parseBasic(`Basic ${b64('a%3Ab:c:d+e%2B')}`)).toEqual({ clientId: 'a:b', clientSecret: 'c:d e+' });
    expect(parseBasic(`basic ${b64('id:')}`)).toEqual({ clientId: 'id', clientSecret: '' });
    expect(parseBasic('Bearer x')).toBeUndefined();
    expect(parseBasic(undefined)).toBeUndefined();
  });

  it('never mixes methods and never reads what it was not given', () => {
    expect(readClientCredentials(undefined, { client_id: 'a', client_secret: 'b' })).toEqual({ clientId: 'a', clientSecret: 'b', method: 'client_secret_post' });
    expect(readClientCredentials(undefined, { client_id: 'a' })).toBeNull();
    let mixed: unknown;
    try {
      readClientCredentials(`Basic ${b64('a:b')}`, { client_secret: 'b' });
    } catch (err) {
      mixed = err;
    }
    // what the client reads, and the reason the log gives
    expect(mixed).toMatchObject({ status: 400, code: 'invalid_request', description: expect.stringMatching(/one method/), detail: 'two_auth_methods' });
  });
});

describe('scope grammar (RFC 6749 §3.3)', () => {
  it.each([
    ['a', ['a']],
    ['a b a', ['a', 'b']],
    ['orders:read https://x/y!#$', ['orders:read', 'https://x/y!#$']],
  ])('parses %j', (value, expected) => {
    expect(parseScope(value)).toEqual(expected);
  });
  it.each([[''], ['a  b'], [' a'], ['a '], ['a"b'], ['a\\b'], ['\u00e9'], ['a\tb']])('refuses %j', (value) => {
    expect(parseScope(value)).toBeNull();
  });
});
