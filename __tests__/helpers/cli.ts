/**
 * The CLI in-process, on a data dir of its own per test: `cli(args)` runs one
 * command and answers its exit code and output.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { main } from '../../lib/cli/main';

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export interface CliDirs {
  /** The test's temporary folder (files it writes go here). */
  readonly tmp: string;
  /** `DATA_DIR` of every command: `tmp/data`. */
  readonly dataDir: string;
  cli(args: string[], env?: NodeJS.ProcessEnv): Promise<Run>;
}

/** Runs one command of the CLI in-process with exactly `env`; answers its exit code and output. */
export async function runCli(args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const code = await main(args, { stdout: (s) => void (stdout += s), stderr: (s) => void (stderr += s), env });
  return { code, stdout, stderr };
}

/** Registers a fresh folder before each test of the file (removed after it); `prefix` names it. */
export function cliPerTest(prefix: string): CliDirs {
  let tmp = '';
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));
  return {
    get tmp() {
      return tmp;
    },
    get dataDir() {
      return path.join(tmp, 'data');
    },
    cli: (args, env = {}) => runCli(args, { DATA_DIR: path.join(tmp, 'data'), ...env }),
  };
}
