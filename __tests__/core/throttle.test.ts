import pino from 'pino';
import { atMostEvery, LogWindows } from '../../lib/core/throttle';
import { ThrottledLog } from '../../lib/core/refusal-log';
import * as visibleText from '../../lib/shared/visible-text';

describe('atMostEvery', () => {
  it('passes the first call, drops the rest of the window, passes the first call after it, with its arguments', () => {
    let clock = 1_000;
    const seen: string[] = [];
    const warn = atMostEvery(60_000, (what: string) => void seen.push(`${clock}:${what}`), () => clock);
    warn('a');
    clock += 59_999;
    warn('b');
    clock += 1;
    warn('c');
    warn('d');
    clock += 120_000;
    warn('e');
    expect(seen).toEqual(['1000:a', '61000:c', '181000:e']);
  });
});

describe('LogWindows', () => {
  it('keeps at most max keys: the oldest window goes first, and a key seen again opens a new window', () => {
    const clock = 1_000;
    const windows = new LogWindows<string>(60_000, () => clock, 2);
    expect(windows.take('a')).toBe(0);
    expect(windows.take('a')).toBeUndefined();
    expect(windows.take('b')).toBe(0);
    expect(windows.take('c')).toBe(0); // 'a' goes
    expect(windows.take('b')).toBeUndefined();
    expect(windows.take('a')).toBe(0);
  });
});

describe('ThrottledLog', () => {
  it('per key: the first of a window at its level, the rest at debug, the next one counting them', () => {
    let clock = 0;
    const lines: [string, Record<string, unknown>][] = [];
    const at = (level: string) => (obj: Record<string, unknown>) => void lines.push([level, obj]);
    const log = new ThrottledLog({ debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, 60_000, () => clock);
    log.report('warn', 'x', { event: 'e', n: 1 }, 'm');
    log.report('warn', 'x', { event: 'e', n: 2 }, 'm');
    log.report('info', 'y', { event: 'e', n: 3 }, 'm');
    clock = 61_000;
    log.report('warn', 'x', { event: 'e', n: 4 }, 'm');
    expect(lines).toEqual([
      ['warn', { event: 'e', n: 1, debug_only_since_last: 0 }],
      ['debug', { event: 'e', n: 2 }],
      ['info', { event: 'e', n: 3, debug_only_since_last: 0 }],
      ['warn', { event: 'e', n: 4, debug_only_since_last: 1 }],
    ]);
  });

  it('a burst that stops: once its window is over, one line at the usual level counts what went to debug, with the last one\'s facts', () => {
    let clock = 0;
    const lines: [string, Record<string, unknown>][] = [];
    const at = (level: string) => (obj: Record<string, unknown>) => void lines.push([level, obj]);
    const log = new ThrottledLog({ debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, 60_000, () => clock);
    try {
      for (let n = 1; n <= 9; n++) log.report('warn', 'guesser', { event: 'client.auth_failed', n }, 'client authentication failed');
      log.report('info', 'quiet', { event: 'token.rejected', n: 10 }, 'token refused');
      clock = 59_999;
      log.flush(); // the window is not over: nothing yet
      expect(lines.filter(([level]) => level !== 'debug')).toHaveLength(2);
      clock = 60_000;
      log.flush();
      log.flush(); // told once
      expect(lines.filter(([level]) => level !== 'debug')).toEqual([
        ['warn', { event: 'client.auth_failed', n: 1, debug_only_since_last: 0 }],
        ['info', { event: 'token.rejected', n: 10, debug_only_since_last: 0 }],
        ['warn', { event: 'client.auth_failed', n: 9, debug_only_since_last: 8, summary: true }],
      ]);
      // the key's next line opens a new window at the usual level, counting none (they were told)
      clock = 70_000;
      log.report('warn', 'guesser', { event: 'client.auth_failed', n: 11 }, 'client authentication failed');
      expect(lines.at(-1)).toEqual(['warn', { event: 'client.auth_failed', n: 11, debug_only_since_last: 0 }]);
    } finally {
      log.stop();
    }
  });

  it('its timer tells the count without a later line, and stops once nothing is held back', () => {
    jest.useFakeTimers({ now: 0 });
    try {
      const lines: [string, Record<string, unknown>][] = [];
      const at = (level: string) => (obj: Record<string, unknown>) => void lines.push([level, obj]);
      const log = new ThrottledLog({ debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, 60_000, () => Date.now());
      log.report('warn', 'k', { event: 'e', n: 1 }, 'm');
      expect(jest.getTimerCount()).toBe(0); // nothing held back: no timer
      log.report('warn', 'k', { event: 'e', n: 2 }, 'm');
      log.report('warn', 'k', { event: 'e', n: 3 }, 'm');
      expect(jest.getTimerCount()).toBe(1);
      jest.advanceTimersByTime(59_000);
      expect(lines.filter(([level]) => level === 'warn')).toHaveLength(1);
      jest.advanceTimersByTime(16_000); // the window ended at 60 s; the timer runs every 15 s
      expect(lines.filter(([level]) => level === 'warn')).toEqual([
        ['warn', { event: 'e', n: 1, debug_only_since_last: 0 }],
        ['warn', { event: 'e', n: 3, debug_only_since_last: 2, summary: true }],
      ]);
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });

  describe('escapes (visibleFields()) only the lines it writes', () => {
    /** A pino logger at `level` writing parsed JSON lines into an array. */
    function pinoAt(level: string) {
      const out: Record<string, unknown>[] = [];
      return { logger: pino({ level }, { write: (line: string) => void out.push(JSON.parse(line) as Record<string, unknown>) }), out };
    }
    const refusal = (n: number) => ({ event: 'token.rejected', n, claimed_client_id: `c${n}\u2028\u202e` });
    let escape: jest.SpyInstance;
    beforeEach(() => {
      escape = jest.spyOn(visibleText, 'visibleFields');
    });
    afterEach(() => escape.mockRestore());

    it('with a logger at info, 1,000 refusals of one key in a minute: two escapes, for the two lines written (the first, the summary), both escaped', () => {
      let clock = 0;
      const { logger, out } = pinoAt('info');
      const log = new ThrottledLog(logger, 60_000, () => clock);
      try {
        for (let n = 1; n <= 1000; n++) log.report('info', 'k', refusal(n), 'm');
        clock = 60_000;
        log.flush();
        expect(out.map(({ level, n, claimed_client_id, debug_only_since_last, summary }) => ({ level, n, claimed_client_id, debug_only_since_last, summary }))).toEqual([
          { level: 30, n: 1, claimed_client_id: 'c1\\u2028\\u202e', debug_only_since_last: 0, summary: undefined },
          { level: 30, n: 1000, claimed_client_id: 'c1000\\u2028\\u202e', debug_only_since_last: 999, summary: true },
        ]);
        expect(escape).toHaveBeenCalledTimes(2);
      } finally {
        log.stop();
      }
    });

    it('with a logger at debug, every line is written escaped; its level is asked per line (pino\'s may change while it runs)', () => {
      let clock = 0;
      const { logger, out } = pinoAt('debug');
      const log = new ThrottledLog(logger, 60_000, () => clock);
      try {
        for (let n = 1; n <= 3; n++) log.report('info', 'k', refusal(n), 'm');
        logger.level = 'info';
        log.report('info', 'k', refusal(4), 'm');
        logger.level = 'debug';
        log.report('info', 'k', refusal(5), 'm');
        clock = 60_000;
        log.flush();
        expect(out.map((l) => [l.level, l.n, l.claimed_client_id, l.summary])).toEqual([
          [30, 1, 'c1\\u2028\\u202e', undefined],
          [20, 2, 'c2\\u2028\\u202e', undefined],
          [20, 3, 'c3\\u2028\\u202e', undefined],
          [20, 5, 'c5\\u2028\\u202e', undefined],
          [30, 5, 'c5\\u2028\\u202e', true],
        ]);
        expect(escape).toHaveBeenCalledTimes(5);
      } finally {
        log.stop();
      }
    });
  });
});
