import { atMostEvery, LogWindows } from '../../lib/core/throttle';
import { ThrottledLog } from '../../lib/core/refusal-log';

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
});

