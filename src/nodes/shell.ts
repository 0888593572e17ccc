/**
 * A node's shell: the one way node drivers act on a machine. The ssh transport (ssh2) and the
 * local transport (child_process) both implement it, so engine installs, model fetches and
 * replica management are the same POSIX sh scripts on either.
 *
 * Also home of the small pieces both transports share (output caps, script checks, deadlines).
 */
import { randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/catalogue.js';

export interface ExecResult {
  readonly code: number | null;
  readonly signal: string | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface ExecOptions {
  /** Bytes written to the script's stdin, then stdin is closed. Use it for secrets. */
  readonly stdin?: string | Uint8Array;
  /** Per-operation timeout; on expiry the operation fails with NODE_TIMEOUT. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

export interface Shell {
  readonly node: string;
  /** Run a POSIX sh script on the node. Every interpolated value must be quoted with shq(). */
  run(script: string, opts?: ExecOptions): Promise<ExecResult>;
  /** Copy a local file to the node, written under a temp name and renamed when complete. */
  upload(localPath: string, remotePath: string, opts?: { readonly timeoutMs?: number; readonly mode?: number }): Promise<void>;
  /** Release the connection (ssh) — idempotent. */
  close(): Promise<void>;
}

/** Quote one argument for POSIX sh: 'it'\''s' style. Safe for any string, including empty. */
export function shq(arg: string): string {
  if (arg.includes('\0')) throw new LlmgwError('SPEC_INVALID_VALUE', 'shq: NUL byte in shell argument (no value with a NUL byte can reach a node script)');
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** Quote and join a command line. */
export function shJoin(args: readonly string[]): string {
  return args.map(shq).join(' ');
}

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
  if (script.includes('\0')) throw new LlmgwError('INTERNAL', 'shell script contains a NUL byte');
  const n = Buffer.byteLength(script);
  if (n > MAX_SCRIPT_BYTES) {
    throw new LlmgwError('INTERNAL', `shell script is ${n} bytes, over the ${MAX_SCRIPT_BYTES}-byte limit for one command line; pass data on stdin or upload a file`, { bytes: n });
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

/** An error's message, or the thrown value as text. */
export function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
