/**
 * The up-gauges exist only where what they watch exists: `ecc_store_up` with
 * an issuer, `ecc_dpop_replay_store_up` with a shared DPoP replay store. A
 * service that only verifies tokens, or an issuer without Redis, must not
 * show a 0 there: the README's alerts (`ecc_store_up == 0`,
 * `ecc_dpop_replay_store_up == 0`) would fire on every such deployment.
 */
import { rmSync } from 'node:fs';
import { Registry } from 'prom-client';
import { createIssuer, requireBearer, type Issuer } from '../../lib';
import { AUDIENCE, ISSUER, tempDir } from '../helpers/app';

/** The sample lines of one metric (its HELP and TYPE lines left out). */
function samples(text: string, name: string): string[] {
  return text.split('\n').filter((l) => l === name || l.startsWith(`${name} `) || l.startsWith(`${name}{`));
}

describe('up-gauges without what they watch', () => {
  const dirs: string[] = [];
  const issuers: Issuer[] = [];
  afterAll(async () => {
    for (const i of issuers) await i.close();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });

  it('a standalone requireBearer() alone on a registry: no ecc_store_up and no ecc_dpop_replay_store_up sample', async () => {
    const registry = new Registry();
    requireBearer({ issuer: ISSUER, audience: AUDIENCE, jwksUri: 'http://127.0.0.1:9/.well-known/jwks.json', metrics: { registry } });
    const text = await registry.metrics();
    expect(samples(text, 'ecc_store_up')).toEqual([]);
    expect(samples(text, 'ecc_dpop_replay_store_up')).toEqual([]);
    // the registry is the package's all the same
    expect(samples(text, 'ecc_bearer_checks_total').length).toBeGreaterThan(0);
  });

  it('an issuer without Redis: ecc_store_up 1, no ecc_dpop_replay_store_up sample', async () => {
    const registry = new Registry();
    const dataDir = tempDir();
    dirs.push(dataDir);
    const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, metrics: { registry } });
    issuers.push(issuer);
    await issuer.ready();
    const text = await registry.metrics();
    expect(samples(text, 'ecc_store_up')).toEqual(['ecc_store_up 1']);
    expect(samples(text, 'ecc_dpop_replay_store_up')).toEqual([]);
  });
});
