import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import express, { type Express } from 'express';
import { createIssuer, type Issuer, type IssuerOptions } from '../../lib';

/** A fresh folder under the run's own (__tests__/helpers/global-setup.js), which the run removes at its end. */
function madeDir(): string {
  return mkdtempSync(join(process.env.ECC_TEST_TMP ?? tmpdir(), 'ecc-test-'));
}

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
  const dataDir = madeDir();
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
  return madeDir();
}

/** An issuer's router and one protected route, `GET /api` (answers the caller's client_id), on a new Express app. */
export function apiApp(issuer: Issuer): Express {
  const app = express();
  app.use(issuer.router());
  app.get('/api', issuer.requireBearer(), (req, res) => void res.json({ client: req.auth!.clientId }));
  return app;
}

export interface LoopbackServer {
  /** `http://127.0.0.1:PORT`, known before the app is built (an issuer needs its own URL). */
  url: string;
  /** The app that answers from now on. */
  serve(app: Express): void;
  /** Drops open connections and stops listening. */
  close(): Promise<void>;
}

/** An HTTP server on 127.0.0.1 with an ephemeral port, for tests that need a real URL (fetch, token clients). */
export async function loopbackServer(): Promise<LoopbackServer> {
  let handler: Express | undefined;
  const server: Server = createServer((req, res) => handler!(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    serve(app) {
      handler = app;
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
