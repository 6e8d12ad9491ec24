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
});
