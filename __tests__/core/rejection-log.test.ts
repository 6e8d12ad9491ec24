import { RejectionLog } from '../../lib/core/rejection-log';
import type { ResolvedLogger } from '../../lib/logger';

function capture() {
  const lines: { level: string; obj: Record<string, unknown> }[] = [];
  const at = (level: string) => (obj: Record<string, unknown>) => void lines.push({ level, obj });
  const logger: ResolvedLogger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  return { logger, lines };
}

describe('RejectionLog', () => {
  it('logs a reason at info the first time in a minute, then at debug, then at info again with the count in between', () => {
    let clock = 1_000_000;
    const { logger, lines } = capture();
    const log = new RejectionLog(logger, 60_000, () => clock);
    const facts = { expected: 'http://b.test', received: 'http://a.test' };
    for (let i = 0; i < 5; i++) log.report('wrong_issuer', 'detail', facts);
    expect(lines.map((l) => l.level)).toEqual(['info', 'debug', 'debug', 'debug', 'debug']);
    expect(lines[0].obj).toEqual({ event: 'token.rejected', reason: 'wrong_issuer', ...facts, detail: 'detail', debug_only_since_last: 0 });
    expect(lines[1].obj).toEqual({ event: 'token.rejected', reason: 'wrong_issuer', ...facts, detail: 'detail' });

    clock += 59_999;
    log.report('wrong_issuer', 'detail', facts);
    expect(lines[5].level).toBe('debug');
    clock += 1;
    log.report('wrong_issuer', 'detail', facts);
    expect(lines[6]).toMatchObject({ level: 'info', obj: { reason: 'wrong_issuer', debug_only_since_last: 5 } });
  });

  it('counts each reason on its own', () => {
    const { logger, lines } = capture();
    const log = new RejectionLog(logger, 60_000, () => 0);
    log.report('expired', undefined, {});
    log.report('unknown_kid', undefined, { kid: 'k' });
    log.report('expired', undefined, {});
    log.report('insufficient_scope', undefined, {});
    expect(lines.map((l) => `${l.level} ${l.obj.reason}`)).toEqual(['info expired', 'info unknown_kid', 'debug expired', 'info insufficient_scope']);
  });

  describe('addresses are cheap: at most 20 open a window of their own per reason and minute, the others are counted together', () => {
    const from = (i: number) => ({ ip: `2001:db8:${i.toString(16)}::1`, method: 'GET', path: '/me' });

    it('30 /64s sending malformed tokens in a minute: 20 info lines of their own, one for the others (its first address), then a summary with their count and up to 5 of them', () => {
      let clock = 0;
      const { logger, lines } = capture();
      const log = new RejectionLog(logger, 60_000, () => clock);
      for (let i = 1; i <= 30; i++) log.report('malformed', 'not a JWS', {}, from(i));
      // an address that has its window keeps it; another reason has its own 20
      log.report('malformed', 'not a JWS', {}, from(3));
      log.report('wrong_alg', 'alg none', {}, from(40));
      const info = lines.filter((l) => l.level === 'info').map((l) => l.obj);
      expect(info.map((l) => [l.reason, l.ip, l.other_addresses])).toEqual([
        ...Array.from({ length: 20 }, (_, i) => ['malformed', `2001:db8:${(i + 1).toString(16)}::1`, undefined]),
        ['malformed', '2001:db8:15::1', true],
        ['wrong_alg', '2001:db8:28::1', undefined],
      ]);
      expect(info[20]).toMatchObject({ event: 'token.rejected', debug_only_since_last: 0, example_addresses: ['2001:db8:15:0::/64'] });
      expect(lines.filter((l) => l.level === 'debug')).toHaveLength(10);

      clock = 60_000;
      (log as unknown as { log: { flush(): void } }).log.flush();
      const summaries = lines.filter((l) => l.obj.summary === true).map((l) => l.obj);
      expect(summaries).toEqual([
        expect.objectContaining({ reason: 'malformed', ip: '2001:db8:3::1', debug_only_since_last: 1 }),
        expect.objectContaining({
          reason: 'malformed',
          other_addresses: true,
          ip: '2001:db8:1e::1',
          debug_only_since_last: 9,
          example_addresses: ['2001:db8:15:0::/64', '2001:db8:16:0::/64', '2001:db8:17:0::/64', '2001:db8:18:0::/64', '2001:db8:19:0::/64'],
        }),
      ]);
      // the next minute: new addresses get windows of their own again, and the others a new list
      lines.length = 0;
      for (let i = 101; i <= 122; i++) log.report('malformed', 'not a JWS', {}, from(i));
      expect(lines.filter((l) => l.level === 'info').map((l) => l.obj.other_addresses)).toEqual([...new Array<undefined>(20).fill(undefined), true]);
      expect(lines.filter((l) => l.level === 'info').at(-1)!.obj.example_addresses).toEqual(['2001:db8:79:0::/64']);
    });

    it('verified clients keep a window each, however many (they are registered ones)', () => {
      const { logger, lines } = capture();
      const log = new RejectionLog(logger, 60_000, () => 0);
      for (let i = 1; i <= 30; i++) log.report('revoked', 'token_revoked', { client_id: `client-${i}` }, from(i));
      expect(lines.filter((l) => l.level === 'info').map((l) => l.obj.client_id)).toEqual(Array.from({ length: 30 }, (_, i) => `client-${i + 1}`));
    });
  });
});
