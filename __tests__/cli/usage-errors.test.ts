/**
 * What a usage error repeats of the command line: the argument it names,
 * through the same quoted() as every other message: no terminal escape
 * sequence reaches stderr, and a huge argument is cut.
 */
import { cliPerTest, type Run } from '../helpers/cli';

const { cli } = cliPerTest('ecc-cli-usage-');
const CLIENT_ID = 'ecc_0123456789abcdef';

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

  // parseArgs kept the last of two values, and `create --name a --name b` made a client named b
  test('a single-value option given twice is refused and changes nothing; repeatable options still repeat', async () => {
    expectCleanUsageError(await cli(['create', '--name', 'a', '--name', 'b']), 'option --name given more than once; give it once', 'create');
    expectCleanUsageError(await cli(['create', '--name', 'a', '--auth=private_key_jwt', '--auth', 'client_secret']), 'option --auth given more than once; give it once', 'create');
    expectCleanUsageError(await cli(['update', CLIENT_ID, '--name', 'x', '--name=y']), 'option --name given more than once; give it once', 'update');
    expectCleanUsageError(await cli(['keys', 'rotate', '--lead-time', '1m', '--lead-time', '2m']), 'option --lead-time given more than once; give it once', 'keys rotate');
    // nothing was created: there is no store to read
    expect((await cli(['list'])).code).toBe(1);

    const created = await cli(['create', '--name', 'a', '--scope', 'x', '--scope', 'y', '--resource', 'https://a.example', '--resource', 'https://b.example', '--json', '--json']);
    expect(created.code).toBe(0);
    const id = (JSON.parse(created.stdout) as { client_id: string }).client_id;
    const shown = JSON.parse((await cli(['show', id, '--json'])).stdout) as { name: string; scope: string; resources: string[] };
    expect(shown.name).toBe('a');
    expect(shown.scope).toBe('x y');
    expect(shown.resources).toEqual(['https://a.example', 'https://b.example']);
  });
});
