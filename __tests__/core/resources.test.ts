import { InvalidTargetError } from '../../lib/errors';
import { ResourcePolicy, parseResourceIndicator } from '../../lib/core/resources';

const A = 'https://api-a.test';
const B = 'https://api-b.test/v1';
const DEFAULT = 'https://api.test';
const policy = new ResourcePolicy({ resources: [A, B], defaultResource: DEFAULT });

function targetError(fn: () => unknown): InvalidTargetError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(InvalidTargetError);
    return err as InvalidTargetError;
  }
  throw new Error('no error thrown');
}

describe('parseResourceIndicator', () => {
  it('accepts absolute URIs (http(s) and URNs) and answers their normalized form', () => {
    expect(parseResourceIndicator('https://API-A.test')).toBe('https://api-a.test/');
    expect(parseResourceIndicator('urn:example:api')).toBe('urn:example:api');
    expect(parseResourceIndicator('https://xn--tda.example/%C3%BC')).toBe('https://xn--tda.example/%C3%BC');
  });

  it.each([
    ['/relative', /absolute/],
    ['api-a.test', /absolute/],
    ['https://a.test#x', /fragment/],
    ['https://a.test/#', /fragment/],
    ['https://a.test/?x=1', /query/],
    [' https://a.test', /space/],
    ['https://a.test/\n', /control/],
    ['', /non-empty/],
    [`https://a.test/${'x'.repeat(2100)}`, /too long/],
    // the CLI audit: these were stored as a client's resources
    ['https://\u00fc.example/', /ASCII/],
    ['https://a.test/\u202eiv', /ASCII/],
    ['https://a.test/\u00a0', /ASCII/],
    ['https://user:pw@a.test/', /user information/],
    ['https://user@a.test/', /user information/],
  ])('refuses %.40j with invalid_target (400)', (value, reason) => {
    const err = targetError(() => parseResourceIndicator(value));
    expect(err.status).toBe(400);
    expect(err.toJSON().error).toBe('invalid_target');
    expect(err.description).toMatch(reason);
  });
});

describe('ResourcePolicy', () => {
  it('refuses a bad configuration with a TypeError', () => {
    expect(() => new ResourcePolicy({ resources: ['/x'], defaultResource: DEFAULT })).toThrow(TypeError);
    expect(() => new ResourcePolicy({ resources: [A], defaultResource: 'https://d.test#f' })).toThrow(TypeError);
  });

  it('RI1: an allowed resource becomes the audience, as the operator spells it', () => {
    expect(policy.audienceFor(A, [A, B])).toBe(A);
    expect(policy.audienceFor('https://API-A.test/', [A, B])).toBe(A);
    expect(policy.audienceFor([B], [A, B])).toBe(B);
  });

  it('RI2: no resource → the default audience (client without a list, or whose list has it)', () => {
    expect(policy.audienceFor(undefined, null)).toBe(DEFAULT);
    expect(policy.audienceFor(undefined, [])).toBe(DEFAULT);
    expect(policy.audienceFor(undefined, [DEFAULT, A])).toBe(DEFAULT);
    // a client limited to one other resource gets that one; with several and no default it must choose
    expect(policy.audienceFor(undefined, [A])).toBe(A);
    expect(targetError(() => policy.audienceFor(undefined, [A, B])).description).toMatch(/required/);
  });

  it('RI2: no resource, and the client\'s list names resources the issuer no longer serves: the one it serves, or a message that says so', () => {
    const gone = 'https://retired.test';
    expect(policy.audienceFor(undefined, [A, gone])).toBe(A);
    expect(policy.audienceFor(undefined, ['https://API-A.test/', gone])).toBe(A);
    expect(targetError(() => policy.audienceFor(undefined, [gone])).description).toBe('none of the resources this client may use is served by this issuer');
    expect(targetError(() => policy.audienceFor(undefined, [gone, 'https://other-retired.test'])).description).toMatch(/none of the resources/);
    // a request naming the retired one is still told it is not served
    expect(targetError(() => policy.audienceFor(gone, [gone])).description).toMatch(/not served/);
  });

  it('RI3: not allowed for the client, unknown to the issuer, relative or with a fragment → invalid_target', () => {
    expect(targetError(() => policy.audienceFor(B, [A])).description).toMatch(/may not/);
    expect(targetError(() => policy.audienceFor(A, null)).description).toMatch(/may not/);
    expect(targetError(() => policy.audienceFor('https://api-c.test', [A, B])).description).toMatch(/not served/);
    targetError(() => policy.audienceFor('/relative', [A]));
    targetError(() => policy.audienceFor('https://api-a.test#x', [A]));
  });

  it('RI4: two resources → invalid_target, even when both are allowed', () => {
    const err = targetError(() => policy.audienceFor([A, B], [A, B]));
    expect(err.description).toMatch(/only one resource/);
  });

  it('checks a client allow-list against the issuer resources', () => {
    expect(policy.clientResources(['https://API-A.test/', B, A])).toEqual([A, B]);
    expect(() => policy.clientResources(['https://api-c.test'])).toThrow(/not one this issuer serves/);
    expect(() => policy.clientResources(['nope'])).toThrow(/absolute/);
    expect(policy.list()).toEqual([DEFAULT, A, B]);
  });
});
