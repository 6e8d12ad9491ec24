/**
 * The compiled example's graceful stop as a real process, as clients meet
 * it: keep-alive clients under load across SIGTERM lose no request they
 * wrote.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import { tempDir } from '../helpers/app';
import { compiledExamples } from '../helpers/compiled-example';

const examples = compiledExamples();
const SERVER_JS = examples.script('server');

type Line = Record<string, unknown>;

/** The compiled server as a process: its JSON log lines, and how it ended. */
function start(env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [SERVER_JS], {
    env: { PATH: process.env.PATH, PORT: '0', HOST: '127.0.0.1', ISSUER: 'http://localhost:3000', DEMO_CLIENT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const killer = setTimeout(() => child.kill('SIGKILL'), 25_000);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal });
    }),
  );
  const lines = (): Line[] => stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Line);
  return {
    child,
    exited,
    lines,
    stderr: () => stderr,
    /** The first log line that matches, once written; rejects if the process exits first. */
    async line(match: (l: Line) => boolean): Promise<Line> {
      for (;;) {
        const found = lines().find(match);
        if (found) return found;
        if (child.exitCode !== null || child.signalCode !== null) throw new Error(`exited (code ${child.exitCode}) without that line; stdout:\n${stdout}\nstderr:\n${stderr}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  };
}

const listening = (l: Line): boolean => l.event === 'server.listening';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Seen = 'answered' | 'refused' | 'lost after written' | 'lost before written';

/** One GET through `agent`: what the client saw. */
function get(url: string, agent: http.Agent): Promise<Seen> {
  return new Promise((resolve) => {
    let written = false;
    const req = http.get(`${url}/health`, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve('answered'));
      res.on('error', () => resolve('lost after written'));
    });
    req.on('finish', () => (written = true));
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'ECONNREFUSED' ? 'refused' : written ? 'lost after written' : 'lost before written'));
  });
}

describe('the graceful stop (compiled, as a real process)', () => {
  beforeAll(() => examples.build(), 130_000);

  it('keep-alive clients under load across SIGTERM: every request is answered or refused as a new connection, none reset after being written (5 stops)', async () => {
    // Before: each stop reset about one request per connection (the server closed connections it saw
    // idle while their clients were writing the next request on them).
    const dataDir = tempDir();
    const rounds: Record<Seen, number>[] = [];
    for (let round = 0; round < 5; round++) {
      const p = start({ DATA_DIR: dataDir });
      const url = String((await p.line(listening)).url);
      const agent = new http.Agent({ keepAlive: true, maxSockets: 6 });
      const seen: Record<Seen, number> = { answered: 0, refused: 0, 'lost after written': 0, 'lost before written': 0 };
      let exited = false;
      const loop = async () => {
        // bounded: the process exits within the stop's 10 s bound, and the loop with it
        while (!exited) {
          const what = await get(url, agent);
          seen[what] += 1;
          if (what === 'refused') await sleep(5);
        }
      };
      const loops = Array.from({ length: 6 }, loop);
      await sleep(150 + 50 * round);
      p.child.kill('SIGTERM');
      const exit = await p.exited;
      exited = true;
      await Promise.all(loops);
      agent.destroy();
      expect(exit).toMatchObject({ code: 0, signal: null });
      rounds.push(seen);
    }
    for (const seen of rounds) {
      expect(seen['lost after written']).toBe(0);
      expect(seen['lost before written']).toBe(0);
      expect(seen.answered).toBeGreaterThan(0);
    }
  }, 60_000);
});
