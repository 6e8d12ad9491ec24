/**
 * The primary's side of METRICS=1 with WORKERS=N (examples/cluster-metrics.ts
 * primaryMetrics()), in this process, with stand-in workers in
 * cluster.workers: what it sends each worker for how many scrapes.
 */
import cluster, { type Worker } from 'node:cluster';
import type { Logger } from 'pino';
import { Counter, Registry } from 'prom-client';
import { primaryMetrics } from '../../examples/cluster-metrics';
import { recorder } from '../helpers/log-recorder';
import { until } from '../helpers/until';

type Sent = { type: string; round?: number; id?: number; text?: string; error?: string };

interface FakeWorker {
  worker: Worker;
  sent: Sent[];
  collects: () => Sent[];
  scraped: () => Sent[];
}

function fakeWorker(id: number): FakeWorker {
  const sent: Sent[] = [];
  const worker = {
    id,
    process: { pid: 100_000 + id },
    isConnected: () => true,
    isDead: () => false,
    send(message: Sent, callback?: (err: Error | null) => void) {
      sent.push(message);
      callback?.(null);
      return true;
    },
  } as unknown as Worker;
  return {
    worker,
    sent,
    collects: () => sent.filter((m) => m.type === 'ecc:metrics:collect'),
    scraped: () => sent.filter((m) => m.type === 'ecc:metrics:scraped'),
  };
}

/** A worker's registry as JSON, with `count` refused requests. */
async function registryJson(count: number): Promise<unknown> {
  const registry = new Registry();
  new Counter({ name: 'refused_total', help: 'refused', registers: [registry] }).inc(count);
  return registry.getMetricsAsJSON();
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const valueIn = (text: string | undefined): number => Number(/^refused_total (\S+)$/m.exec(text ?? '')?.[1]);

describe('examples/cluster-metrics.ts primaryMetrics()', () => {
  const workers = cluster.workers as Record<number, Worker | undefined>;

  afterEach(() => {
    for (const id of Object.keys(workers)) delete workers[Number(id)];
  });

  function group(n: number, collectTimeoutMs?: number) {
    const { logger, events } = recorder();
    const primary = primaryMetrics(logger as unknown as Logger, collectTimeoutMs);
    const fakes = Array.from({ length: n }, (_, i) => fakeWorker(i + 1));
    for (const f of fakes) {
      workers[f.worker.id] = f.worker;
      primary.onMessage(f.worker, { type: 'ecc:metrics:hello' });
    }
    const answer = async (f: FakeWorker, round: number, count: number) =>
      primary.onMessage(f.worker, { type: 'ecc:metrics:local', round, metrics: await registryJson(count) });
    return { primary, fakes, events, answer };
  }

  it('16 scrapes at once: one collection from each worker, one sum for all; a scrape within REUSE_MS gets that sum, a later one a new collection', async () => {
    const { primary, fakes, answer } = group(2);
    const [a, b] = fakes;
    for (let id = 0; id < 16; id++) primary.onMessage(a.worker, { type: 'ecc:metrics:scrape', id });
    await sleep(20);
    // the finding: 16 collections per worker, each worker serializing its registry 16 times
    expect([a.collects().length, b.collects().length]).toEqual([1, 1]);
    await answer(a, a.collects()[0].round!, 3);
    await answer(b, b.collects()[0].round!, 4);
    await until(() => a.scraped().length === 16);
    expect(new Set(a.scraped().map((m) => m.id))).toEqual(new Set(Array.from({ length: 16 }, (_, i) => i)));
    expect(a.scraped().map((m) => valueIn(m.text))).toEqual(Array(16).fill(7));

    // at once after: the same sum, nobody asked
    primary.onMessage(b.worker, { type: 'ecc:metrics:scrape', id: 0 });
    await until(() => b.scraped().length === 1);
    expect(valueIn(b.scraped()[0].text)).toBe(7);
    expect([a.collects().length, b.collects().length]).toEqual([1, 1]);

    // a second later: collected again
    await sleep(1_100);
    primary.onMessage(b.worker, { type: 'ecc:metrics:scrape', id: 1 });
    await until(() => a.collects().length === 2 && b.collects().length === 2);
    await answer(a, a.collects()[1].round!, 5);
    await answer(b, b.collects()[1].round!, 4);
    await until(() => b.scraped().length === 2);
    expect(valueIn(b.scraped()[1].text)).toBe(9);
  }, 15_000);

  it('a worker that has not answered is not asked again until it answers, and later scrapes do not wait for it', async () => {
    const { primary, fakes, events, answer } = group(2, 300);
    const [live, stuck] = fakes;
    // both answer once: the stuck one's counters are known
    primary.onMessage(live.worker, { type: 'ecc:metrics:scrape', id: 0 });
    await until(() => stuck.collects().length === 1);
    await answer(live, live.collects()[0].round!, 3);
    await answer(stuck, stuck.collects()[0].round!, 4);
    await until(() => live.scraped().length === 1);

    // from now on, `stuck` answers nothing (SIGSTOP)
    await sleep(1_100);
    primary.onMessage(live.worker, { type: 'ecc:metrics:scrape', id: 1 });
    await until(() => live.collects().length === 2);
    await answer(live, live.collects()[1].round!, 5);
    // the round waits for `stuck` up to the collection timeout, then counts it as last seen
    await until(() => live.scraped().length === 2);
    expect(valueIn(live.scraped()[1].text)).toBe(9);
    expect(events.filter((e) => e.event === 'metrics.worker_unanswered')).toHaveLength(1);

    for (let i = 2; i < 5; i++) {
      await sleep(1_100);
      primary.onMessage(live.worker, { type: 'ecc:metrics:scrape', id: i });
      await until(() => live.collects().length === i + 1);
      const started = performance.now();
      await answer(live, live.collects()[i].round!, 5 + i);
      await until(() => live.scraped().length === i + 1);
      // not held up by the worker that owes an answer
      expect(performance.now() - started).toBeLessThan(150);
      expect(valueIn(live.scraped()[i].text)).toBe(5 + i + 4);
    }
    // one collection waiting for it, not one per scrape
    expect(stuck.collects()).toHaveLength(2);
    expect(events.filter((e) => e.event === 'metrics.worker_unanswered')).toHaveLength(1);

    // it runs again and answers the collection it had: asked again from the next round on
    await answer(stuck, stuck.collects()[1].round!, 6);
    expect(events.filter((e) => e.event === 'metrics.worker_answered')).toHaveLength(1);
    await sleep(1_100);
    primary.onMessage(live.worker, { type: 'ecc:metrics:scrape', id: 9 });
    await until(() => stuck.collects().length === 3);
    await answer(live, live.collects()[5].round!, 10);
    await answer(stuck, stuck.collects()[2].round!, 7);
    await until(() => live.scraped().length === 6);
    expect(valueIn(live.scraped()[5].text)).toBe(17);
  }, 20_000);

  it("a worker's final counts (it stops gracefully): in the sums at once, once, after its exit too; it is not asked again", async () => {
    const { primary, fakes, answer } = group(2);
    const [a, b] = fakes;
    primary.onMessage(a.worker, { type: 'ecc:metrics:scrape', id: 0 });
    await until(() => b.collects().length === 1);
    await answer(a, a.collects()[0].round!, 3);
    await answer(b, b.collects()[0].round!, 4);
    await until(() => a.scraped().length === 1);
    expect(valueIn(a.scraped()[0].text)).toBe(7);

    // b counted 2 more, then stops: its final counts replace the sum just reused
    primary.onMessage(b.worker, { type: 'ecc:metrics:final', metrics: await registryJson(6) });
    primary.onMessage(a.worker, { type: 'ecc:metrics:scrape', id: 1 });
    await until(() => a.collects().length === 2);
    // an answer b still had on its way (a collection it got before it closed) is not counted again
    await answer(b, b.collects()[0].round!, 6);
    await answer(a, a.collects()[1].round!, 3);
    await until(() => a.scraped().length === 2);
    expect(valueIn(a.scraped()[1].text)).toBe(9);
    expect(b.collects()).toHaveLength(1);

    // its exit: counted once still
    (b.worker as unknown as { isDead: () => boolean }).isDead = () => true;
    delete workers[b.worker.id];
    primary.onExit(b.worker);
    await sleep(1_100);
    primary.onMessage(a.worker, { type: 'ecc:metrics:scrape', id: 2 });
    await until(() => a.collects().length === 3);
    await answer(a, a.collects()[2].round!, 4);
    await until(() => a.scraped().length === 3);
    expect(valueIn(a.scraped()[2].text)).toBe(10);
  }, 10_000);
});
