/** A logger that keeps what it is given, each line as its object with its `level` first. */
export function recorder() {
  const events: Record<string, unknown>[] = [];
  const log = (level: string) => (obj: Record<string, unknown>) => void events.push({ level, ...obj });
  return { events, logger: { info: log('info'), warn: log('warn'), error: log('error') } };
}
