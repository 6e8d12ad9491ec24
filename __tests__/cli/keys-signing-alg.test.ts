/**
 * `keys rotate` without SIGNING_ALG keeps the algorithm of the key that
 * signs now (the issuer's rule, signingKeyAt), not that of the newest key:
 * a pending key of another algorithm, which the rotation withdraws, does
 * not decide it.
 */
import { cliPerTest } from '../helpers/cli';

const { cli } = cliPerTest('ecc-cli-signing-alg-');

interface ListedKey {
  kid: string;
  alg: string;
  status: string;
}

async function keysJson(): Promise<ListedKey[]> {
  const r = await cli(['keys', 'list', '--json']);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as ListedKey[];
}

test('keys rotate without SIGNING_ALG while an RS256 key is pending and ES256 signs: the new key is ES256, the RS256 one is withdrawn', async () => {
  expect((await cli(['keys', 'rotate', '--lead-time', '0', '--json'])).code).toBe(0);
  const pending = await cli(['keys', 'rotate', '--lead-time', '10m', '--json'], { SIGNING_ALG: 'RS256' });
  expect(pending.code).toBe(0);
  const rs256 = JSON.parse(pending.stdout) as { kid: string; alg: string; status: string };
  expect(rs256).toMatchObject({ alg: 'RS256', status: 'pending' });
  const signing = (await keysJson()).filter((k) => k.status === 'current');
  expect(signing.map((k) => k.alg)).toEqual(['ES256']);

  const r = await cli(['keys', 'rotate', '--lead-time', '10m']);
  expect(r.code).toBe(0);
  expect(r.stderr).toBe('');
  expect(r.stdout).toMatch(/^New signing key \S+ \(ES256\) published\.\n/);
  expect(r.stdout).toContain(`${signing[0].kid} signs until then.`);
  expect(r.stdout).toContain(`The pending key ${rs256.kid} `);
  const keys = await keysJson();
  expect(keys.filter((k) => k.status === 'pending').map((k) => k.alg)).toEqual(['ES256']);
  expect(keys.find((k) => k.kid === rs256.kid)?.status).toBe('retired');
  expect(keys.filter((k) => k.status === 'current').map((k) => k.kid)).toEqual([signing[0].kid]);

  // --json says the same: a second rotation withdraws the ES256 key the first one published
  const firstNew = (await keysJson()).find((k) => k.status === 'pending')!;
  const again = await cli(['keys', 'rotate', '--lead-time', '10m', '--json']);
  expect(again.code).toBe(0);
  expect(JSON.parse(again.stdout)).toEqual({
    kid: expect.any(String),
    alg: 'ES256',
    status: 'pending',
    activates_at: expect.any(String),
    signs_until_then: signing[0].kid,
    withdrawn: [firstNew.kid],
  });
  const now = await cli(['keys', 'rotate', '--lead-time', '0', '--json']);
  expect(JSON.parse(now.stdout)).toMatchObject({ status: 'current', signs_until_then: null });
  expect(JSON.parse(now.stdout).withdrawn).toHaveLength(1);
});

test('keys rotate without SIGNING_ALG after a switch to RS256 has taken effect keeps RS256', async () => {
  expect((await cli(['keys', 'rotate', '--lead-time', '0'], { SIGNING_ALG: 'RS256' })).code).toBe(0);
  const r = await cli(['keys', 'rotate', '--lead-time', '10m', '--json']);
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout)).toMatchObject({ alg: 'RS256', status: 'pending' });
});
