/**
 * Picks a node's transport: ssh (ssh2, one shared connection per Shell) or local (child_process).
 * Each call opens a new Shell (and, for ssh, its own connection): hold one Shell per node and
 * close it when the node leaves the spec or its connection settings (host, port, user, host key,
 * identity) change.
 */
import type { Logger } from 'pino';
import { LlmgwError } from '../errors/catalogue.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import { LocalShell } from './local.js';
import type { ExecResult, Shell, ShellTimeouts } from './shell.js';
import { SshShell, type SshOptions } from './ssh.js';

export type { ShellTimeouts } from './shell.js';
export { LocalShell } from './local.js';
export { SshShell, SshConnection, type SshOptions } from './ssh.js';

export interface OpenShellOptions extends Omit<SshOptions, 'logger' | 'timeouts'> {
  readonly secretsDir: string;
  readonly logger?: Logger;
  readonly timeouts?: ShellTimeouts;
}

export function openShell(node: NodeSpec, opts: OpenShellOptions): Shell {
  if (node.transport === 'local') {
    return new LocalShell(node.name, { timeouts: opts.timeouts, outputCapBytes: opts.outputCapBytes });
  }
  return new SshShell(node, opts);
}

/**
 * Throw NODE_COMMAND_FAILED unless the script exited 0. `what` names the step ("install engine
 * llama@b4000"); the message carries the stderr tail (secrets never go into scripts, see Shell).
 */
export function assertSuccess(node: string, what: string, r: ExecResult): ExecResult {
  if (r.code === 0) return r;
  const tail = r.stderr.trim().split('\n').slice(-20).join('\n').slice(-4000);
  const how = r.code !== null ? `exit code ${r.code}` : `signal ${r.signal ?? 'unknown'}`;
  throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: ${what} failed (${how})${tail ? `: ${tail}` : ''}`,
    { node, what, code: r.code, signal: r.signal, stderr: tail });
}
