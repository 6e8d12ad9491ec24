import { LoggerFanout, resolveLogger, type Logger } from '../../lib/logger';

describe('LoggerFanout', () => {
  const recording = (lines: string[], name: string): Logger => ({
    info: (o) => void lines.push(`${name} info ${String(o.event)}`),
    warn: (o) => void lines.push(`${name} warn ${String(o.event)}`),
    error: (o) => void lines.push(`${name} error ${String(o.event)}`),
  });

  it('writes each line to every logger added, once per logger option however often added; false adds none', () => {
    const lines: string[] = [];
    const a = recording(lines, 'a');
    const b = recording(lines, 'b');
    const fanout = new LoggerFanout();
    // a logger is wrapped anew by each resolveLogger(): still one logger
    fanout.add(a, resolveLogger(a));
    fanout.add(a, resolveLogger(a));
    fanout.add(false, resolveLogger(false));
    fanout.add(b, resolveLogger(b));
    fanout.warn({ event: 'x' }, 'm');
    fanout.debug({ event: 'y' });
    expect(lines).toEqual(['a warn x', 'b warn x']);
  });

  it('the default logger (no logger option) counts once, whatever resolveLogger() made for it each time', () => {
    const lines: string[] = [];
    const fanout = new LoggerFanout();
    fanout.add(undefined, { ...resolveLogger(recording(lines, 'first')), debug: () => undefined });
    fanout.add(undefined, { ...resolveLogger(recording(lines, 'second')), debug: () => undefined });
    fanout.info({ event: 'z' }, 'm');
    expect(lines).toEqual(['first info z']);
  });

  it('a logger that throws: every other logger still gets the line, the caller never sees the exception, and the next line is tried again', () => {
    const lines: string[] = [];
    let thrown = 0;
    const broken = () => {
      thrown++;
      throw new Error('log transport closed');
    };
    const fanout = new LoggerFanout();
    const a: Logger = { debug: broken, info: broken, warn: broken, error: broken };
    fanout.add(a, resolveLogger(a));
    const b: Logger = { ...recording(lines, 'b'), debug: (o) => void lines.push(`b debug ${String(o.event)}`) };
    fanout.add(b, resolveLogger(b));
    expect(() => {
      fanout.debug({ event: 'd' });
      fanout.info({ event: 'i' }, 'm');
      fanout.warn({ event: 'w' }, 'm');
      fanout.error({ event: 'e' }, 'm');
    }).not.toThrow();
    expect(lines).toEqual(['b debug d', 'b info i', 'b warn w', 'b error e']);
    expect(thrown).toBe(4);
  });
});
