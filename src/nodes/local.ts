/**
 * The local transport: the node is the controller's own machine. Scripts run as `sh -c script`
 * in a new process group (session) so a timeout or abort kills the script and everything it
 * started (except processes that detach themselves with setsid, like replicas).
 *
 * Also home of the small pieces both transports share (output caps, script checks, deadlines).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, rename, stat, unlink } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { LlmgwError } from '../errors/catalogue.js';
import type { ExecOptions, ExecResult, Shell } from './shell.js';

export interface ShellTimeouts {
  /** ssh connect + handshake + auth (default 10 s). */
  readonly connectMs?: number;
  /** run() when ExecOptions.timeoutMs is not given (default 60 s). */
  readonly runMs?: number;
  /** upload() when its timeoutMs is not given (default 10 min). */
  readonly uploadMs?: number;
}

export const DEFAULT_TIMEOUTS = Object.freeze({ connectMs: 10_000, runMs: 60_000, uploadMs: 600_000 });
/** Each of stdout and stderr is capped at this many bytes; the tail is kept. */
export const DEFAULT_OUTPUT_CAP = 4 * 1024 * 1024;
/**
 * Scripts travel as one argv string (`sh -c SCRIPT`); Linux caps one argument at 128 KiB
 * (MAX_ARG_STRLEN). Larger data belongs on stdin or in an uploaded file.
 */
export const MAX_SCRIPT_BYTES = 100 * 1024;

export function checkScript(script: string): void {
  if (script.includes('\0')) throw new Error('shell script contains a NUL byte');
  const n = Buffer.byteLength(script);
  if (n > MAX_SCRIPT_BYTES) {
    throw new Error(`shell script is ${n} bytes, over the ${MAX_SCRIPT_BYTES}-byte limit for one command line; pass data on stdin or upload a file`);
  }
}

/** Collects a stream's bytes, keeping at most `cap` (the tail). */
export class OutputTail {
  private chunks: Buffer[] = [];
  private size = 0;
  total = 0;
  constructor(private readonly cap: number) {}
  push(chunk: Buffer): void {
    this.chunks.push(chunk);
    this.size += chunk.length;
    this.total += chunk.length;
    while (this.chunks.length > 1 && this.size - this.chunks[0]!.length >= this.cap) {
      this.size -= this.chunks.shift()!.length;
    }
  }
  toString(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - this.cap)).toString('utf8');
  }
}

/**
 * Runs `fn` with an AbortSignal that fires when `timeoutMs` passes (reason: NODE_TIMEOUT) or the
 * caller's signal aborts (its reason). `fn` must settle soon after the signal fires.
 */
export async function withDeadline<T>(
  node: string, what: string, timeoutMs: number, outer: AbortSignal | undefined,
  fn: (op: AbortSignal) => Promise<T>,
): Promise<T> {
  outer?.throwIfAborted();
  const ctl = new AbortController();
  const timer = setTimeout(() => {
    ctl.abort(new LlmgwError('NODE_TIMEOUT', `node ${node}: ${what} timed out after ${timeoutMs} ms`, { node, timeoutMs }));
  }, timeoutMs);
  const onOuter = () => ctl.abort(outer?.reason);
  outer?.addEventListener('abort', onOuter, { once: true });
  try {
    return await fn(ctl.signal);
  } finally {
    clearTimeout(timer);
    outer?.removeEventListener('abort', onOuter);
  }
}

/** Rejects with the signal's reason when it aborts; otherwise settles like `p`. */
export function raceAbort<T>(p: Promise<T>, op: AbortSignal): Promise<T> {
  if (op.aborted) return Promise.reject(op.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(op.reason);
    op.addEventListener('abort', onAbort, { once: true });
    p.then(
      (v) => { op.removeEventListener('abort', onAbort); resolve(v); },
      (e) => { op.removeEventListener('abort', onAbort); reject(e); },
    );
  });
}

export function tempName(path: string): string {
  return `${path}.tmp.${randomBytes(6).toString('hex')}`;
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

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
