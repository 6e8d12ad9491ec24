/**
 * What a usage error repeats of the command line: the argument it names,
 * through the same quoted() as every other message: no terminal escape
 * sequence reaches stderr, and a huge argument is cut.
 */
import { cliPerTest, type Run } from '../helpers/cli';

const { cli } = cliPerTest('ecc-cli-usage-');

/** Exit 2, nothing on stdout, one line of printable text pointing at the help of `command`. */
function expectCleanUsageError(r: Run, line: string, command: string): void {
  expect(r.code).toBe(2);
  expect(r.stdout).toBe('');
  expect(r.stderr).toBe(`error: ${line} (run 'client-credentials ${command} --help' for usage)\n`);
}

describe('usage errors', () => {
  // the argument was put in the line as it was: ESC ] 0 ; … BEL set the terminal's title, ESC [ 31 m its colour
  test('an unexpected argument or unknown option with escape sequences is shown with ? for them', async () => {
    expectCleanUsageError(await cli(['list', 'zz\u001b]0;pwned\u0007']), "unexpected argument 'zz?]0;pwned?'", 'list');
    expectCleanUsageError(await cli(['list', '--x\u001b[31m']), "unknown option '--x?[31m'", 'list');
    expectCleanUsageError(await cli(['rotate-secret', 'a', 'b\u009b2J\u202e']), "unexpected argument 'b?2J?'", 'rotate-secret');
  });

  // the name was cut at its first quote ("unknown option '--x'")
  test('an unknown option holding a quote is named whole', async () => {
    expectCleanUsageError(await cli(['list', "--x'y"]), "unknown option '--x'y'", 'list');
  });

  test('a huge argument is cut to 200 characters with an ellipsis', async () => {
    const huge = 'a'.repeat(100_000);
    expectCleanUsageError(await cli(['list', huge]), `unexpected argument '${'a'.repeat(200)}…'`, 'list');
    expectCleanUsageError(await cli(['list', `--${huge}`]), `unknown option '--${'a'.repeat(198)}…'`, 'list');
    expectCleanUsageError(await cli(['create', '--name', 'x', huge]), `unexpected argument '${'a'.repeat(200)}…'`, 'create');
  });
});
