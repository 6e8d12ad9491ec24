/**
 * examples/http-server.ts: an Express app served with its requests and
 * responses built on the app's own prototypes answers exactly as with
 * http.createServer(app), on Express 5 and 4 (this folder runs on both).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import v8 from 'node:v8';
import express from 'express';
import { createHttpServer } from '../../examples/http-server';

function testApp(): express.Express {
  const app = express();
  app.get('/json', (req, res) => {
    res.set('X-Seen', String(req.get('x-probe'))).json({ q: req.query.q ?? null, path: req.path, host: req.hostname });
  });
  app.post('/echo', express.json({ limit: '1kb' }), (req, res) => {
    const later = req as unknown as Record<string, unknown>;
    later.addedLater = { by: 'a handler' };
    res.status(201).json({ body: req.body, addedLater: later.addedLater });
  });
  // a mounted sub-app switches the prototypes to its own and back
  const sub = express();
  sub.get('/x', (req, res) => {
    res.json({ baseUrl: req.baseUrl, subApp: req.app === sub, ip: typeof req.ip });
  });
  app.use('/sub', sub);
  app.get('/after-sub', (req, res) => {
    res.json({ mainApp: req.app === app, path: req.path });
  });
  app.get('/boom', () => {
    throw Object.assign(new Error('no'), { status: 418 });
  });
  app.use((err: { status?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(err.status ?? 500).json({ error: 'handled' });
  });
  return app;
}

async function listen(server: http.Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function answer(base: string, path: string, init?: RequestInit): Promise<{ status: number; type: string | null; etag: string | null; seen: string | null; body: string }> {
  const res = await fetch(`${base}${path}`, init);
  return { status: res.status, type: res.headers.get('content-type'), etag: res.headers.get('etag'), seen: res.headers.get('x-seen'), body: await res.text() };
}

describe('createHttpServer(app)', () => {
  const servers: http.Server[] = [];
  afterAll(async () => {
    for (const s of servers) {
      s.closeAllConnections();
      await new Promise((r) => s.close(r));
    }
  });

  it('builds each request and response on the app’s prototypes before Express sees them; http.createServer(app) does not', async () => {
    for (const [make, expected] of [
      [createHttpServer, true],
      [(app: express.Express) => http.createServer(app), false],
    ] as const) {
      const app = testApp();
      const server = make(app);
      servers.push(server);
      let before: boolean[] = [];
      server.prependListener('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
        before = [Object.getPrototypeOf(req) === app.request, Object.getPrototypeOf(res) === app.response];
      });
      const base = await listen(server);
      expect((await answer(base, '/json')).status).toBe(200);
      expect(before).toEqual([expected, expected]);
    }
  });

  it('answers as http.createServer(app) does: JSON, query, headers, a parsed body, a property set later, errors, 404, HEAD, 304', async () => {
    const prewired = createHttpServer(testApp());
    const plain = http.createServer(testApp());
    servers.push(prewired, plain);
    const [a, b] = [await listen(prewired), await listen(plain)];
    const cases: [string, RequestInit | undefined][] = [
      ['/json?q=1', { headers: { 'x-probe': 'p' } }],
      ['/echo', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ n: 1 }) }],
      ['/echo', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{bad' }],
      ['/boom', undefined],
      ['/nowhere', undefined],
      ['/sub/x', undefined],
      ['/after-sub', undefined],
      ['/json', { method: 'HEAD' }],
    ];
    for (const [path, init] of cases) {
      const [x, y] = [await answer(a, path, init), await answer(b, path, init)];
      // the 404 page names no port; the JSON route names the host, the same on both
      expect({ path, ...x }).toEqual({ path, ...y });
    }
    expect(JSON.parse((await answer(a, '/sub/x')).body)).toEqual({ baseUrl: '/sub', subApp: true, ip: 'string' });
    expect(JSON.parse((await answer(a, '/after-sub')).body)).toEqual({ mainApp: true, path: '/after-sub' });
    const first = await answer(a, '/json');
    expect(first.body).toBe(JSON.stringify({ q: null, path: '/json', host: '127.0.0.1' }));
    expect(JSON.parse((await answer(a, '/echo', cases[1][1])).body)).toEqual({ body: { n: 1 }, addedLater: { by: 'a handler' } });
    // a conditional GET (node:http: fetch adds Cache-Control: no-cache to it, which Express honours with a 200)
    const status = await new Promise<number | undefined>((resolve, reject) => {
      http.get(`${a}/json`, { headers: { 'if-none-match': first.etag! } }, (res) => {
        res.resume();
        resolve(res.statusCode);
      }).on('error', reject);
    });
    expect(status).toBe(304);
  });

  it('keeps requests and responses fast-property objects past middleware layers, a mount and a route (no dictionary mode)', async () => {
    v8.setFlagsFromString('--allow-natives-syntax');
    const hasFastProperties = new Function('o', 'return %HasFastProperties(o)') as (o: object) => boolean;
    // the probe can say no: an object after a delete is a dictionary
    const probe: Record<string, number> = { a: 1, b: 2, c: 3 };
    delete probe.a;
    expect([hasFastProperties({ a: 1 }), hasFastProperties(probe)]).toEqual([true, false]);

    const app = express();
    const seen: Record<string, boolean[]> = {};
    const look = (name: string): express.RequestHandler => (req, res, next) => {
      seen[name] = [hasFastProperties(req), hasFastProperties(res)];
      next();
    };
    app.get('/health', (_req, res) => res.json({ ok: true }));
    app.use(look('middleware'));
    app.use('/api', look('mount'), (req, _res, next) => {
      (req as unknown as Record<string, unknown>).auth = { clientId: 'c' };
      next();
    });
    app.get('/api/whoami', look('route'), (_req, res) => res.json({ ok: true }));
    const server = createHttpServer(app);
    // a second server for the same app builds on the same prototypes
    const second = createHttpServer(app);
    servers.push(server, second);
    const [base, base2] = [await listen(server), await listen(second)];
    // V8 settles an object layout after a few objects of a kind: look at later requests
    for (let i = 0; i < 12; i++) expect((await answer(i % 2 ? base : base2, '/api/whoami')).status).toBe(200);
    expect(seen).toEqual({ middleware: [true, true], mount: [true, true], route: [true, true] });
  });
});
