import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { verifyDpopProof, type DpopVerifyOptions, type VerifiedDpopProof } from '../../lib/core/dpop';
import { DpopNonces } from '../../lib/core/dpop-nonces';
import { MemoryReplayStore } from '../../lib/core/dpop-replay';
import { InvalidDpopProofError, UseDpopNonceError } from '../../lib/errors';
import { DpopKey } from '../../lib/jwt/dpop-proof';
import { newDpopKey } from '../helpers/dpop';

interface Made {
  alg: string;
  /** jose's RFC 7638 thumbprint of the key. */
  jkt: string;
  accessToken: string;
  requests: Array<{ url: string; method: string; proof: string }>;
}

/** Proofs made by openid-client's DPoP handle (ESM, so in a child process: __tests__/interop/dpop-proofs.mjs). */
describe('DPoP interop: proofs made by openid-client', () => {
  const nonces = new DpopNonces(randomBytes(32));
  let made: Made[];

  beforeAll(async () => {
    const script = join(__dirname, '../interop/dpop-proofs.mjs');
    const { stdout } = await promisify(execFile)(process.execPath, [script, nonces.current()], { timeout: 30_000 });
    made = JSON.parse(stdout) as Made[];
  }, 40_000);

  const options = (extra: Partial<DpopVerifyOptions> = {}): DpopVerifyOptions => ({ replay: new MemoryReplayStore(), ...extra });

  it('covers ES256, ES384, PS256 and RS256, each with a token request, its nonce retry and a resource request', () => {
    expect(made.map((m) => m.alg)).toEqual(['ES256', 'ES384', 'PS256', 'RS256']);
    for (const m of made) expect(m.requests.map((r) => r.method)).toEqual(['POST', 'POST', 'POST', 'GET']);
  });

  it('accepts its token request proofs, with the same thumbprint as jose computes', () => {
    for (const m of made) {
      const result = verifyDpopProof(m.requests[0].proof, { htm: 'POST', htu: 'https://as.test/oauth/token' }, options()) as VerifiedDpopProof;
      expect([m.alg, result.jkt]).toEqual([m.alg, m.jkt]);
    }
  });

  it('asks for a nonce when nonces are on, and accepts its retry carrying the nonce', () => {
    for (const m of made) {
      const replay = new MemoryReplayStore();
      const expected = { htm: 'POST', htu: 'https://as.test/oauth/token' };
      expect(() => verifyDpopProof(m.requests[0].proof, expected, options({ replay, nonces }))).toThrow(UseDpopNonceError);
      expect(verifyDpopProof(m.requests[1].proof, expected, options({ replay, nonces }))).toHaveProperty('jkt', m.jkt);
    }
  });

  it('accepts its resource request proofs (query and fragment dropped, ath, cnf.jkt) once', () => {
    for (const m of made) {
      const replay = new MemoryReplayStore();
      const expected = { htm: 'GET', htu: 'https://api.test/api/orders?page=2', accessToken: m.accessToken, jkt: m.jkt };
      expect(verifyDpopProof(m.requests[3].proof, expected, options({ replay, status: 401 }))).toHaveProperty('jkt', m.jkt);
      expect(() => verifyDpopProof(m.requests[3].proof, expected, options({ replay, status: 401 }))).toThrow(InvalidDpopProofError);
    }
  });
});

/** Our proofs checked by jose (ESM, in a child process: __tests__/interop/dpop-verify.mjs). */
describe('DPoP interop: proofs made here, checked by jose', () => {
  it('verifies them for every algorithm, with the same thumbprint and claims', async () => {
    const keys: DpopKey[] = (['ES256', 'ES384', 'PS256', 'RS256'] as const).map((alg) => newDpopKey(alg));
    const proofs = keys.map((k) => k.proof({ htm: 'GET', htu: 'https://api.test/api/orders?x=1', accessToken: 'at', nonce: 'n' }));
    const child = execFile(process.execPath, [join(__dirname, '../interop/dpop-verify.mjs')], { timeout: 30_000 });
    child.stdin!.end(JSON.stringify(proofs));
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d));
    await new Promise((resolve, reject) => child.on('close', resolve).on('error', reject));
    const checked = JSON.parse(stdout) as Array<{ ok: boolean; alg: string; jkt: string; payload: Record<string, unknown>; error?: string }>;
    expect(checked.map((c) => [c.ok, c.alg, c.jkt])).toEqual(keys.map((k) => [true, k.alg, k.jkt]));
    for (const c of checked) expect(c.payload).toMatchObject({ htm: 'GET', htu: 'https://api.test/api/orders', nonce: 'n' });
  }, 40_000);
});
