import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type Express } from 'express';
import { createIssuer, type Issuer, type IssuerOptions } from '../../lib';

export const ISSUER = 'http://issuer.test';
export const AUDIENCE = 'http://api.test';

export interface TestSetup {
  issuer: Issuer;
  app: Express;
  dataDir: string;
  close(): Promise<void>;
}

/** A fresh issuer on its own temp data dir, mounted on a new Express app (the "existing API"). */
export async function setup(options: Partial<IssuerOptions> = {}, mount?: (app: Express, issuer: Issuer) => void): Promise<TestSetup> {
  const dataDir = mkdtempSync(join(tmpdir(), 'ecc-test-'));
  const issuer = createIssuer({ issuer: ISSUER, audience: AUDIENCE, dataDir, logger: false, ...options });
  await issuer.ready();
  const app = express();
  app.disable('x-powered-by');
  if (mount) mount(app, issuer);
  else app.use(issuer.router());
  return {
    issuer,
    app,
    dataDir,
    async close() {
      await issuer.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'ecc-test-'));
}
