/** Runs llmgw commands in-process (fast) or as the real binary (bin/llmgw.js on dist/). */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { run } from '../../src/cli/main.js';
import { repoRoot } from './paths.js';

export interface CliResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export async function runCli(argv: readonly string[], cwd: string = repoRoot, env: NodeJS.ProcessEnv = process.env): Promise<CliResult> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await run(argv, { out: (l) => out.push(l), err: (l) => err.push(l), cwd, env });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

export function spawnCli(argv: readonly string[], cwd: string = repoRoot, env: NodeJS.ProcessEnv = process.env): CliResult {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'llmgw.js'), ...argv], { cwd, env, encoding: 'utf8' });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr };
}
