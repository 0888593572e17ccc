/**
 * The local transport: the node is the controller's own machine. Scripts run as `sh -c script`
 * in a new process group (session) so a timeout or abort kills the script and everything it
 * started (except processes that detach themselves with setsid, like replicas).
 */
import { spawn } from 'node:child_process';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, rename, stat, unlink } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { LlmgwError } from '../errors/catalogue.js';
import {
  checkScript, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUTS, errText, OutputTail, tempName, withDeadline,
  type ExecOptions, type ExecResult, type Shell, type ShellTimeouts,
} from './shell.js';

export class LocalShell implements Shell {
  private readonly timeouts: Required<ShellTimeouts>;
  private readonly outputCap: number;

  constructor(readonly node: string, opts: { readonly timeouts?: ShellTimeouts; readonly outputCapBytes?: number } = {}) {
    this.timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
    this.outputCap = opts.outputCapBytes ?? DEFAULT_OUTPUT_CAP;
  }

  run(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    checkScript(script);
    return withDeadline(this.node, 'run', opts.timeoutMs ?? this.timeouts.runMs, opts.signal, (op) => this.spawn(script, opts.stdin, op));
  }

  private spawn(script: string, stdin: string | Uint8Array | undefined, op: AbortSignal): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      // detached: the child calls setsid(), so -pid names its whole process group.
      const child = spawn('sh', ['-c', script], { detached: true, stdio: ['pipe', 'pipe', 'pipe'] });
      const out = new OutputTail(this.outputCap);
      const err = new OutputTail(this.outputCap);
      let exited = false;
      child.stdout.on('data', (d: Buffer) => out.push(d));
      child.stderr.on('data', (d: Buffer) => err.push(d));
      child.stdin.on('error', () => { /* the script did not read its stdin (EPIPE) */ });
      child.stdin.end(stdin === undefined ? undefined : Buffer.from(stdin));
      child.once('exit', () => { exited = true; });
      const onAbort = () => {
        try { process.kill(-child.pid!, 'SIGKILL'); } catch { /* already gone */ }
        // Reject once the script itself is reaped, so "timed out" implies "not running".
        const done = () => reject(op.reason);
        if (exited || child.pid === undefined) done();
        else { child.once('exit', done); setTimeout(done, 5_000).unref(); }
      };
      op.addEventListener('abort', onAbort, { once: true });
      child.once('error', (e) => {
        op.removeEventListener('abort', onAbort);
        reject(new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: cannot start sh: ${errText(e)}`, { node: this.node }, { cause: e }));
      });
      child.once('close', (code, signal) => {
        op.removeEventListener('abort', onAbort);
        if (op.aborted) return;
        resolve({ code, signal, stdout: out.toString(), stderr: err.toString() });
      });
    });
  }

  upload(localPath: string, remotePath: string, opts: { readonly timeoutMs?: number; readonly mode?: number } = {}): Promise<void> {
    return withDeadline(this.node, `upload to ${remotePath}`, opts.timeoutMs ?? this.timeouts.uploadMs, undefined, async (op) => {
      const tmp = tempName(remotePath);
      try {
        const mode = opts.mode ?? ((await stat(localPath)).mode & 0o777);
        await pipeline(createReadStream(localPath), createWriteStream(tmp, { mode: 0o600 }), { signal: op });
        await chmod(tmp, mode);
        await rename(tmp, remotePath);
      } catch (e) {
        await unlink(tmp).catch(() => {});
        if (op.aborted) throw op.reason;
        throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: upload ${localPath} to ${remotePath} failed: ${errText(e)}`, { node: this.node, localPath, remotePath }, { cause: e });
      }
    });
  }

  async close(): Promise<void> {
    /* nothing held */
  }
}
