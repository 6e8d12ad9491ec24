/**
 * The `client-credentials` command line: clients and signing keys, straight
 * on the store through `lib/core`. It never loads Express. This module only
 * dispatches; each command group has its own module.
 */
import { UsageError } from './args';
import { clientKey } from './client-keys';
import { create, list, revoke, revokeTokens, rotateSecret, show, update } from './clients';
import { LazyStore, OutputError, oneLine, quoted, withHelp, type CliIo, type Context, type Handler } from './context';
import { HELP, helpPointer } from './help';
import { keys } from './keys';

export type { CliIo } from './context';

const help: Handler = async (args, ctx) => {
  // `help --help`, `help create -h`: the help they name
  const topic = args.filter((a) => a !== '--help' && a !== '-h').join(' ');
  if (!Object.hasOwn(HELP, topic)) {
    ctx.err(`error: no help for ${quoted(topic)}`);
    ctx.err();
    ctx.io.stderr(HELP['']);
    return 2;
  }
  ctx.io.stdout(HELP[topic]);
  return 0;
};


const COMMANDS: Record<string, Handler> = {
  create: withHelp('create', create),
  list: withHelp('list', list),
  show: withHelp('show', show),
  update: withHelp('update', update),
  revoke: withHelp('revoke', revoke),
  'revoke-tokens': withHelp('revoke-tokens', revokeTokens),
  'rotate-secret': withHelp('rotate-secret', rotateSecret),
  keys,
  'client-key': clientKey,
  help,
};

async function dispatch(argv: string[], ctx: Context): Promise<number> {
  const [command, ...rest] = argv;
  if (command === '-h' || command === '--help') {
    ctx.io.stdout(HELP['']);
    return 0;
  }
  const handler = command !== undefined && Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
  if (!handler) {
    if (command === undefined) {
      ctx.io.stderr(HELP['']);
    } else {
      // one line: a typo should not scroll the terminal with the whole usage
      const what = command.startsWith('-') ? `expected a command before ${quoted(command)}` : `unknown command ${quoted(command)}`;
      ctx.err(`error: ${what} (commands: ${Object.keys(COMMANDS).join(', ')}; client-credentials --help describes them)`);
    }
    return 2;
  }
  ctx.stores.expectsStore = command !== 'create';
  return handler(rest, ctx);
}

/**
 * Runs one command. Exit codes: 0 done, 1 failed (unknown or revoked client,
 * store error), 2 usage error (bad flags, bad values, bad environment).
 */
export async function main(argv: string[], io: CliIo): Promise<number> {
  // the first failure of stdout; later writes are dropped
  let outputFailure: { error: unknown } | undefined;
  const stdout = (s: string): void => {
    if (outputFailure) return;
    try {
      io.stdout(s);
    } catch (error) {
      outputFailure = { error };
    }
  };
  const ctx: Context = {
    io: { ...io, stdout },
    out: (line = '') => stdout(`${line}\n`),
    err: (line = '') => io.stderr(`${line}\n`),
    stores: new LazyStore(io.env, (line) => io.stderr(`${line}\n`)),
    delivered: async () => {
      if (!outputFailure) await io.flush?.().catch((error: unknown) => void (outputFailure = { error }));
      if (outputFailure) throw new OutputError(outputFailure.error);
    },
  };
  let code: number;
  try {
    code = await dispatch(argv, ctx);
  } catch (error) {
    await ctx.stores.close().catch(() => undefined);
    return report(error, ctx);
  }
  try {
    await ctx.stores.close();
  } catch (error) {
    return report(error, ctx);
  }
  try {
    await ctx.delivered();
  } catch (error) {
    // a reader that stopped reading (`list | head`) is not an error, as for any Unix tool; a full disk is
    if ((error as OutputError).code === 'EPIPE') return code;
    ctx.err(`error: ${(error as OutputError).message}; the output is incomplete`);
    return code || 1;
  }
  return code;
}

function report(error: unknown, ctx: Context): number {
  if (error instanceof UsageError) {
    ctx.err(`error: ${oneLine(error.message)} (${helpPointer(error.command)})`);
    return 2;
  }
  const message = oneLine(error instanceof Error ? error.message : String(error)) || 'unknown error';
  ctx.err(`error: ${message}`);
  // TypeError is how the core rejects input (a malformed scope, a bad name, a bad DATABASE_URL)
  return error instanceof TypeError ? 2 : 1;
}

/**
 * Writes to `stream`, keeping its first error (EPIPE, ENOSPC) instead of
 * throwing it; `flush` waits until every write so far was accepted and
 * rejects with that error.
 */
function streamWriter(stream: NodeJS.WriteStream): { write: (s: string) => void; flush: () => Promise<void> } {
  let failure: { error: unknown } | undefined;
  let last = Promise.resolve();
  stream.on('error', (error) => void (failure ??= { error }));
  return {
    write(s) {
      if (failure) return;
      last = new Promise((resolve) => {
        try {
          stream.write(s, (error) => {
            if (error) failure ??= { error };
            resolve();
          });
        } catch (error) {
          failure ??= { error };
          resolve();
        }
      });
    },
    async flush() {
      await last;
      if (failure) throw failure.error;
    },
  };
}

/** Entry point of `bin/client-credentials.js`. */
export async function run(): Promise<void> {
  // an output error is never thrown (no stack trace): main() reports stdout's, stderr's cannot be reported
  const stdout = streamWriter(process.stdout);
  const stderr = streamWriter(process.stderr);
  try {
    process.exitCode = await main(process.argv.slice(2), {
      stdout: stdout.write,
      stderr: stderr.write,
      flush: stdout.flush,
      env: process.env,
    });
  } catch (err) {
    process.stderr.write(`error: ${oneLine(err instanceof Error ? err.message : String(err))}\n`);
    process.exitCode = 1;
  }
}
