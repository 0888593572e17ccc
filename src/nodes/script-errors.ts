/**
 * A node script that failed, as an LlmgwError: its `llmgw-error: CODE msg` line (ops/prelude.ts's
 * llmgw_fail), ENOSPC, or NODE_COMMAND_FAILED.
 */
import { LlmgwError, Reasons, type ReasonCode } from '../errors/catalogue.js';
import { tailOf } from './ops/sections.js';
import type { ExecResult } from './shell.js';

/** Turn a failed script into an LlmgwError: its `llmgw-error: CODE msg` line, ENOSPC, or NODE_COMMAND_FAILED. */
export function scriptError(node: string, what: string, res: ExecResult): LlmgwError {
  const stderr = tailOf(res.stderr, 40);
  const how = res.code !== null ? `exit code ${res.code}` : `signal ${res.signal ?? 'unknown'}`;
  const lines = res.stderr.split('\n');
  let code: ReasonCode | null = null;
  let message = '';
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /^llmgw-error: ([A-Z_]+) (.*)$/.exec(lines[i]!);
    if (m && m[1]! in Reasons) {
      code = m[1] as ReasonCode;
      message = m[2]!;
      break;
    }
  }
  const diskFull = /No space left on device|ENOSPC/i.test(res.stderr);
  const keep: readonly ReasonCode[] = ['ENGINE_CHECKSUM_MISMATCH', 'MODEL_CHECKSUM_MISMATCH', 'ENGINE_TOOL_MISSING', 'ENGINE_NOT_FOUND', 'MODEL_FILE_NOT_FOUND', 'REPLICA_NOT_FOUND'];
  if (diskFull && (code === null || !keep.includes(code))) {
    return new LlmgwError('NODE_DISK_FULL', `node ${node}: ${what}: no space left on device`, { node, what, stderr });
  }
  if (code !== null) {
    const logTail = stderr.split('\n').filter((l) => !l.startsWith('llmgw-error: ')).join('\n');
    return new LlmgwError(code, `node ${node}: ${what}: ${message}`, { node, what, logTail });
  }
  return new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: ${what} failed (${how})${stderr ? `: ${tailOf(stderr, 5)}` : ''}`, {
    node, what, code: res.code, signal: res.signal, stderr,
  });
}
