import { normalizeHtu, requestHtu } from '../../lib/core/dpop-htu';

describe('normalizeHtu (RFC 3986 §6.2.2, §6.2.3)', () => {
  it.each([
    ['HTTPS://AS.TEST:443/oauth/token', 'https://as.test/oauth/token'],
    ['http://as.test:80/x', 'http://as.test/x'],
    ['https://as.test:8443/x', 'https://as.test:8443/x'],
    ['https://as.test', 'https://as.test/'],
    ['https://as.test/a/./b/../c', 'https://as.test/a/c'],
    ['https://as.test/a/%2e%2E/b', 'https://as.test/b'],
    ['https://as.test/%7euser/%7E', 'https://as.test/~user/~'],
    ['https://as.test/a%2fb%c3%a4', 'https://as.test/a%2Fb%C3%A4'],
    ['https://as.test/x?q=1#frag', 'https://as.test/x'],
    ['https://AS.test./x', 'https://as.test./x'],
  ])('%s → %s', (input, output) => {
    expect(normalizeHtu(input)).toBe(output);
  });

  it('keeps path case and trailing slashes (they name other resources)', () => {
    expect(normalizeHtu('https://as.test/A')).not.toBe(normalizeHtu('https://as.test/a'));
    expect(normalizeHtu('https://as.test/a/')).not.toBe(normalizeHtu('https://as.test/a'));
  });

  // userinfo: no request URI carries it, and RFC 9110 §4.2.4 has a recipient treat it as an error
  it.each([['/oauth/token'], ['as.test/oauth/token'], ['ftp://as.test/x'], ['file:///etc/passwd'], ['javascript:alert(1)'], [''], ['https://'], ['https://user:pw@as.test/x'], ['https://user@as.test/x'], ['https://:pw@as.test/x'], ['https://@as.test/x'], ['HTTPS:\\\\u@as.test/x']])(
    'refuses %p',
    (input) => {
      expect(normalizeHtu(input)).toBeUndefined();
    },
  );
});

describe('requestHtu', () => {
  it('joins the configured base and the original URL', () => {
    expect(requestHtu('https://api.test', '/v1/api/orders?page=2')).toBe('https://api.test/v1/api/orders?page=2');
    expect(requestHtu('https://api.test/', '/api/orders')).toBe('https://api.test/api/orders');
    expect(requestHtu('https://public.test/prefix', '/api/orders')).toBe('https://public.test/prefix/api/orders');
  });

  it('takes the path of an absolute-form request target (RFC 9112 §3.2.2), on the configured host', () => {
    expect(requestHtu('https://api.test', 'http://127.0.0.1:4131/api/whoami?x=1')).toBe('https://api.test/api/whoami?x=1');
    expect(normalizeHtu(requestHtu('https://api.test', 'HTTP://evil.test'))).toBe('https://api.test/');
    expect(normalizeHtu(requestHtu('https://api.test', 'https://evil.test?x'))).toBe('https://api.test/');
    expect(normalizeHtu(requestHtu('https://api.test/prefix', 'http://[::1]:80//evil.test/x'))).toBe('https://api.test/prefix//evil.test/x');
  });

  it('keeps a path that looks like another authority on the configured host', () => {
    expect(normalizeHtu(requestHtu('https://api.test', '//evil.test/api/orders'))).toBe('https://api.test//evil.test/api/orders');
    expect(normalizeHtu(requestHtu('https://api.test', '/\\evil.test/x'))).toMatch(/^https:\/\/api\.test\//);
  });
});
