/**
 * `describe` when a local service is reachable. Otherwise the block is skipped
 * with one line on stderr, or fails when REQUIRE_SERVICES=1 (CI must not skip
 * silently).
 */
export function describeIfReachable(service: string, reachable: boolean, where: string, title: string, fn: () => void): void {
  if (reachable) {
    describe(title, fn);
  } else if (process.env.REQUIRE_SERVICES === '1') {
    describe(title, () => {
      it(`needs ${service}`, () => {
        throw new Error(`${service} required (REQUIRE_SERVICES=1) but not reachable at ${where}`);
      });
    });
  } else {
    // stderr directly: console.warn in jest adds a multi-line stack location.
    process.stderr.write(`${service} not reachable at ${where}: skipping ${title}\n`);
    describe.skip(title, fn);
  }
}
