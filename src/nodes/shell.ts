/**
 * A node's shell: the one way node drivers act on a machine. The ssh transport (ssh2) and the
 * local transport (child_process) both implement it, so engine installs, model fetches and
 * replica management are the same POSIX sh scripts on either.
 */
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
  if (arg.includes('\0')) throw new Error('shq: NUL byte in shell argument');
  return `'${arg.replace(/'/g, `'\\''`)}'`;
}

/** Quote and join a command line. */
export function shJoin(args: readonly string[]): string {
  return args.map(shq).join(' ');
}
