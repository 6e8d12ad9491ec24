import { parseArgs } from 'node:util';
import { clip } from '../shared/visible-text';
// context imports this module too: these are only called, never read at load time
import { MAX_QUOTED, printable, quoted } from './context';

/** A mistake in the command line or the environment: exit code 2, with a pointer to the help of `command`. */
export class UsageError extends Error {
  constructor(
    message: string,
    /** Words of the command whose help fits, e.g. `"create"` or `"keys rotate"`; `""` for the top level. */
    readonly command: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** A well-formed request that cannot be done (unknown client, revoked client): exit code 1. */
export class CommandError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CommandError';
  }
}

/** The options of one command, as node:util parseArgs takes them. */
export type OptionSpec = Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }>;

/** What parseArgs returns for `S`: strings, string lists or booleans, each absent when not given. */
export type OptionValues<S extends OptionSpec> = {
  [K in keyof S]?: S[K]['type'] extends 'string' ? (S[K]['multiple'] extends true ? string[] : string) : boolean;
};

/** True when `-h` or `--help` appears before a `--` terminator. */
export function wantsHelp(args: readonly string[]): boolean {
  for (const a of args) {
    if (a === '--') return false;
    if (a === '-h' || a === '--help') return true;
  }
  return false;
}

/**
 * Turns node:util's parseArgs errors into one short line naming the problem;
 * the argument it names goes through quoted() (escape sequences, length).
 */
function describeParseError(err: Error & { code?: string }): string {
  // up to the quote that ends node's first sentence: the argument itself may hold a quote
  const named = /'(.*?)'(?:\. |$)/s.exec(err.message)?.[1];
  switch (err.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      return `unknown option ${quoted(named ?? '?')}`;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      return `unexpected argument ${quoted(named ?? '?')}`;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const flag = quoted(/'(-[^' ]+)/.exec(err.message)?.[1] ?? named ?? 'option');
      if (/does not take an argument/.test(err.message)) return `option ${flag} does not take a value`;
      if (/ambiguous/.test(err.message)) return `option ${flag} needs a value; to give one that starts with '-', write ${flag.slice(1, -1)}=VALUE`;
      return `option ${flag} needs a value`;
    }
    default:
      return printable(clip(err.message.split('. ')[0], MAX_QUOTED));
  }
}

function strictParse(command: string, args: string[], options: OptionSpec): { values: Record<string, unknown>; positionals: string[] } {
  try {
    const parsed = parseArgs({ args, options, strict: true, allowPositionals: true, tokens: true });
    refuseRepeated(command, parsed.tokens, options);
    return parsed;
  } catch (err) {
    // by code, not instanceof: node:util's errors may come from another realm (as under jest)
    const code = (err as { code?: unknown })?.code;
    if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS_')) throw new UsageError(describeParseError(err as Error), command);
    throw err;
  }
}

/**
 * A string option that takes one value, given more than once (`--name a
 * --name b`), is a usage error: parseArgs would keep the last one silently,
 * and the operator may have meant the first. Repeatable ones (`--resource`)
 * and flags (`--json --json` says nothing twice) are left alone.
 */
function refuseRepeated(command: string, tokens: ReadonlyArray<{ kind: string; name?: string }>, options: OptionSpec): void {
  const seen = new Set<string>();
  for (const token of tokens) {
    if (token.kind !== 'option' || token.name === undefined) continue;
    const option = options[token.name];
    if (option?.type !== 'string' || option.multiple) continue;
    if (seen.has(token.name)) throw new UsageError(`option --${token.name} given more than once; give it once`, command);
    seen.add(token.name);
  }
}

/** Whether `arg` spells one of `options` (`--name`, `--name=value`, `-h`). */
function isOption(arg: string, options: OptionSpec): boolean {
  if (arg.startsWith('--')) return Object.hasOwn(options, arg.slice(2).split('=')[0]);
  const shorts = Object.values(options).map((o) => o.short);
  return arg.length > 1 && [...arg.slice(1)].every((c) => shorts.includes(c));
}

/**
 * Moves the arguments that look like a positional of `shape` (a client id may
 * start with "-") behind a `--`, so that parseArgs takes them as positionals
 * rather than as unknown options. Values of string options are left alone.
 */
function protectPositionals(args: string[], options: OptionSpec, shape: RegExp | undefined): string[] {
  if (!shape) return args;
  const kept: string[] = [];
  const moved: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--') {
      moved.push(...args.slice(i + 1));
      break;
    }
    if (arg.startsWith('-') && !isOption(arg, options) && shape.test(arg)) {
      moved.push(arg);
      continue;
    }
    kept.push(arg);
    const option = arg.startsWith('--') && !arg.includes('=') ? options[arg.slice(2)] : undefined;
    if (option?.type === 'string' && i + 1 < args.length) kept.push(args[++i]);
  }
  return moved.length > 0 ? [...kept, '--', ...moved] : kept;
}

export interface PositionalSpec {
  min: number;
  max: number;
  /** Name in messages, e.g. `CLIENT_ID`; one per positional (`['CLIENT_ID', 'KID']`) names just those missing. */
  name?: string | readonly string[];
  /** A positional of this shape is taken as one even when it starts with "-". */
  shape?: RegExp;
}

/**
 * Strict parseArgs: unknown options, missing values and extra arguments
 * (beyond `positionals.max`) are usage errors for `command`.
 */
export function parseCommand<S extends OptionSpec>(
  command: string,
  args: string[],
  options: S,
  positionals: PositionalSpec = { min: 0, max: 0 },
): { values: OptionValues<S>; positionals: string[] } {
  const parsed = strictParse(command, protectPositionals(args, options, positionals.shape), options);
  const found = parsed.positionals;
  if (found.length < positionals.min) {
    const { name } = positionals;
    const missing = name === undefined ? 'argument' : typeof name === 'string' ? name : name.slice(found.length, positionals.min).join(' and ');
    throw new UsageError(`missing ${missing}`, command);
  }
  if (found.length > positionals.max) throw new UsageError(`unexpected argument ${quoted(found[positionals.max])}`, command);
  return { values: parsed.values as OptionValues<S>, positionals: found };
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400 };

/**
 * `30s`, `15m`, `2h`, `1d` or a plain whole number of seconds, from 0 to
 * `maxSeconds`. Throws a UsageError naming `what` otherwise.
 */
export function parseDuration(text: string, what: string, command: string, maxSeconds: number): number {
  const match = /^(\d+)([smhd]?)$/.exec(text.trim());
  if (!match) {
    throw new UsageError(`${what} must be a duration like 30s, 15m, 2h, 1d or a number of seconds, got ${JSON.stringify(text)}`, command);
  }
  const seconds = Number(match[1]) * UNITS[match[2] || 's'];
  if (!Number.isSafeInteger(seconds) || seconds > maxSeconds) {
    throw new UsageError(`${what} must be at most ${formatDuration(maxSeconds)}, got ${JSON.stringify(text)}`, command);
  }
  return seconds;
}

/** `7200` → `2h`, `90` → `90s`: the largest unit that divides evenly. */
export function formatDuration(seconds: number): string {
  for (const [unit, size] of [['d', 86400], ['h', 3600], ['m', 60]] as const) {
    if (seconds >= size && seconds % size === 0) return `${seconds / size}${unit}`;
  }
  return `${seconds}s`;
}
