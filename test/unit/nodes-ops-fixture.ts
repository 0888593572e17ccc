/**
 * The fixture of the node-operation tests (nodes-ops-*.test.ts): a temp dir laid out like a node's
 * data dir (replicas/, engines/, models/, .locks/), and a runner that runs a rendered script with a
 * given shell the way the local transport does (`SHELL -c SCRIPT`, secrets on stdin), so each test
 * renders a script, runs it under dash and bash, and parses what it printed.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ExecResult } from '../../src/nodes/shell.js';

/** The shells every operation runs under: POSIX sh as Debian has it (dash), and bash. */
export const SHELLS = ['dash', 'bash'] as const;
export type ShellName = (typeof SHELLS)[number];

/** A node data dir in a fresh temp dir; `root` holds it and anything else a test puts beside it. */
export interface DataDir {
  readonly root: string;
  readonly dataDir: string;
  remove(): void;
}

export function makeDataDir(label: string): DataDir {
  const root = mkdtempSync(join(tmpdir(), `llmgw-ops-${label}-`));
  const dataDir = join(root, 'data');
  for (const d of ['replicas', 'engines', 'models', '.locks']) mkdirSync(join(dataDir, d), { recursive: true });
  return { root, dataDir, remove: () => rmSync(root, { recursive: true, force: true }) };
}

/** Run a script with `shell -c`, stdin given (or empty), bounded in time; its result as a Shell reports one. */
export function run(shell: ShellName, script: string, opts: { stdin?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): ExecResult {
  const r = spawnSync(shell, ['-c', script], {
    input: opts.stdin ?? '', encoding: 'utf8', timeout: opts.timeoutMs ?? 30_000, killSignal: 'SIGKILL',
    ...(opts.env ? { env: opts.env } : {}),
  });
  if (r.error) throw r.error;
  return { code: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

/** Run and require exit 0 (the stderr in the message otherwise). */
export function runOk(shell: ShellName, script: string, opts: { stdin?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): ExecResult {
  const r = run(shell, script, opts);
  assert.equal(r.code, 0, `${shell}: exit ${r.code} (${r.signal ?? 'no signal'}): ${r.stderr}`);
  return r;
}

/** An executable shell script at path (a stand-in for llama-server and the like). */
export function writeExe(path: string, body: string): string {
  writeFileSync(path, `#!/bin/sh\n${body}`);
  chmodSync(path, 0o755);
  return path;
}

/** The start time (/proc/<pid>/stat field 22) of a live process, as the scripts record it. */
export function procStartTime(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(') ') + 2).split(' ')[19]!;
}

/** Kill a process group (a replica leads its own), ignoring one already gone. */
export function killGroup(pid: number): void {
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}
