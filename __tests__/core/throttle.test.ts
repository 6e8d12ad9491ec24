import { atMostEvery } from '../../lib/core/throttle';

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
