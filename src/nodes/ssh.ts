/**
 * The ssh transport (ssh2): one TCP connection per node, opened lazily and shared by every
 * channel (exec, sftp); reconnects after a drop, with backoff between failed connects; the
 * node's host key is pinned (never accepted on first use).
 *
 * Remote command execution. An ssh exec request carries ONE string, which sshd hands to the
 * remote user's login shell as `$SHELL -c STRING`. We send (M = a random per-run marker)
 *
 *     exec sh -c 'printf '\''%s\n'\'' M; printf '\''%s\n'\'' M$$ >&2; exec sh -c "$1"' llmgw <shq(script)>
 *
 * so the login shell only has to parse single quotes and `exec` (any POSIX login shell: sh,
 * dash, bash, ksh, zsh) and the script reaches `sh -c` byte for byte. Consequences:
 *  - The script is visible in the node's `ps` (it is argv): secrets go on stdin, never in it.
 *  - The script is one argv string, so it is capped at MAX_SCRIPT_BYTES (Linux: 128 KiB).
 *  - stdin is free for data: ExecOptions.stdin is written, then stdin is closed (always closed,
 *    so a script reading stdin sees EOF instead of hanging).
 *  - Whatever the login shell's rc files print (a motd-ish ~/.bashrc) comes before the marker
 *    lines and is dropped from stdout/stderr.
 *  - sshd makes the login shell a session (and process group) leader; both levels `exec`, so
 *    the pid after M on stderr is the script's process group. On timeout/abort a second
 *    channel runs `kill -s KILL -- -PGID`, which ends the script and everything it started,
 *    except processes that detached with setsid (replicas).
 *    (The ssh "signal" channel request is not used: OpenSSH refuses it for sessions without
 *    privilege separation, i.e. root logins. Closing the channel does not stop the command, and
 *    sshd keeps the session's MaxSessions slot while it runs.)
 */
import { randomBytes } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { finished } from 'node:stream';
import type { Client, ClientChannel, SFTPWrapper } from 'ssh2';
import { LlmgwError } from '../errors/catalogue.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import {
  checkScript, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUTS, errText, OutputTail, raceAbort, shq, tempName, withDeadline,
  type ExecOptions, type ExecResult, type Shell, type ShellTimeouts,
} from './shell.js';
import { SshConnection, type SshOptions } from './ssh-connection.js';

export { SshConnection, validIdentityName, type SshOptions } from './ssh-connection.js';
export { fingerprint, NO_MATCHING_HOST_KEY, parseHostKey, type PinnedKey } from './ssh-hostkey.js';

/**
 * ssh2 gives these errors no code, so they are matched by text (pinned against the real library in
 * test/integration/nodes-ssh.test.ts, so an upgrade that changes them fails there):
 * - 'Not connected': a channel asked of a client whose socket is gone (thrown by exec/sftp);
 * - 'No response from server': the connection closed before the server answered a channel request.
 */
export function isConnectionGone(e: unknown): boolean {
  const m = errText(e);
  return m === 'Not connected' || m === 'No response from server';
}

/** Thrown when a channel could not be opened because the connection was gone: safe to retry. */
class ConnectionGone extends Error {}

// ---------------------------------------------------------------- shell

/**
 * The exact string sent in the ssh exec request for a script (see the module comment). `marker`
 * ([a-z0-9:-] only) starts a line on stdout and, followed by the process group id, on stderr;
 * whatever the login shell's rc files print before it is dropped.
 */
export function remoteCommand(script: string, marker: string): string {
  if (!/^[a-z0-9:-]+$/.test(marker)) throw new LlmgwError('INTERNAL', 'remoteCommand: bad marker');
  const wrapper = `printf '%s\\n' ${marker}; printf '%s\\n' ${marker}$$ >&2; exec sh -c "$1"`;
  return `exec sh -c ${shq(wrapper)} llmgw ${shq(script)}`;
}

/** Passes a stream through to `sink` once `marker` + value + "\n" has gone by; hands the value to onMarker (null if never seen). */
export class AfterMarker {
  private head: Buffer | null = Buffer.alloc(0);
  constructor(private readonly marker: Buffer, private readonly sink: OutputTail, private readonly onMarker: (value: string | null) => void) {}
  push(d: Buffer): void {
    if (this.head === null) { this.sink.push(d); return; }
    const head = (this.head = Buffer.concat([this.head, d]));
    const i = head.indexOf(this.marker);
    const nl = i < 0 ? -1 : head.indexOf(0x0a, i + this.marker.length);
    if (nl >= 0) {
      this.head = null;
      this.sink.push(head.subarray(nl + 1));
      this.onMarker(head.subarray(i + this.marker.length, nl).toString('latin1'));
    } else if (head.length > 1024 * 1024) {
      this.end(); // no marker in 1 MiB: not our wrapper speaking; keep everything
    }
  }
  end(): void {
    if (this.head === null) return;
    const head = this.head;
    this.head = null;
    this.sink.push(head);
    this.onMarker(null);
  }
}

export class SshShell implements Shell {
  readonly node: string;
  readonly connection: SshConnection;
  private readonly timeouts: Required<ShellTimeouts>;
  private readonly outputCap: number;

  constructor(spec: NodeSpec, opts: SshOptions) {
    this.node = spec.name;
    this.connection = new SshConnection(spec, opts);
    this.timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
    this.outputCap = opts.outputCapBytes ?? DEFAULT_OUTPUT_CAP;
  }

  run(script: string, opts: ExecOptions = {}): Promise<ExecResult> {
    checkScript(script);
    return withDeadline(this.node, 'run', opts.timeoutMs ?? this.timeouts.runMs, opts.signal, (op) =>
      this.withChannelSlot(op, (client) => this.exec(client, script, opts.stdin, op)));
  }

  upload(localPath: string, remotePath: string, opts: { readonly timeoutMs?: number; readonly mode?: number } = {}): Promise<void> {
    return withDeadline(this.node, `upload to ${remotePath}`, opts.timeoutMs ?? this.timeouts.uploadMs, undefined, async (op) => {
      let mode = opts.mode;
      if (mode === undefined) {
        try {
          mode = (await stat(localPath)).mode & 0o777;
        } catch (e) {
          throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: upload: cannot read local file ${localPath}: ${errText(e)}`, { node: this.node, localPath }, { cause: e });
        }
      }
      const m = mode;
      await this.withChannelSlot(op, (client) => this.sftpUpload(client, localPath, remotePath, m, op));
    });
  }

  close(): Promise<void> {
    return this.connection.close();
  }

  /** Get the connection and a channel slot; retry once on a fresh connection if it was gone before anything started. */
  private async withChannelSlot<T>(op: AbortSignal, fn: (client: Client) => Promise<T>): Promise<T> {
    const release = await this.connection.acquire(op);
    try {
      for (let attempt = 0; ; attempt++) {
        const client = await this.connection.get(op);
        try {
          return await fn(client);
        } catch (e) {
          if (e instanceof ConnectionGone && attempt === 0) { this.connection.drop(client); continue; }
          if (e instanceof ConnectionGone) {
            throw new LlmgwError('NODE_UNREACHABLE', `node ${this.node}: connection lost: ${e.message}`, { node: this.node }, { cause: e });
          }
          throw e;
        }
      }
    } finally {
      release();
    }
  }

  /**
   * Opens an exec channel. `onExit` is attached inside ssh2's callback, not after the promise
   * resolves: when the exec reply, the output, the exit status and the close arrive in one read (a
   * short command on a busy machine), ssh2 handles them all before any promise continuation runs,
   * and the 'exit' event, unlike buffered stream data, is gone by then.
   */
  private openExec(client: Client, command: string, onExit?: (code: number | null, signal?: string) => void): Promise<ClientChannel> {
    return openAgainWhileRefused(() => this.openExecOnce(client, command, onExit));
  }

  private openExecOnce(client: Client, command: string, onExit?: (code: number | null, signal?: string) => void): Promise<ClientChannel> {
    return new Promise((resolve, reject) => {
      try {
        client.exec(command, (err, ch) => {
          if (!err) {
            if (onExit) ch.once('exit', onExit);
            resolve(ch);
          }
          else if (isConnectionGone(err)) reject(new ConnectionGone(err.message));
          else reject(new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: cannot open an exec channel: ${err.message}`, { node: this.node }, { cause: err }));
        });
      } catch (e) {
        reject(isConnectionGone(e) ? new ConnectionGone(errText(e)) : e);
      }
    });
  }

  private exec(client: Client, script: string, stdin: string | Uint8Array | undefined, op: AbortSignal): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      const marker = `llmgw-run-${randomBytes(8).toString('hex')}:`;
      const out = new OutputTail(this.outputCap);
      const err = new OutputTail(this.outputCap);
      let settled = false;
      let abandoned = false;
      let channel: ClientChannel | null = null;
      let exited = false;
      let code: number | null = null;
      let signal: string | null = null;
      let gotPgid: (id: number | null) => void = () => {};
      const pgid = new Promise<number | null>((r) => { gotPgid = r; });
      const stdoutParser = new AfterMarker(Buffer.from(marker), out, () => {});
      const stderrParser = new AfterMarker(Buffer.from(marker), err, (v) => {
        const id = v === null ? NaN : Number(v);
        gotPgid(Number.isInteger(id) && id > 1 ? id : null);
      });

      const onAbort = () => {
        if (settled) return;
        settled = true;
        // Kill the remote process group once its id is known (the login shell's rc files may still be
        // running), so a timed-out run is not left running; then give up the channel.
        void (async () => {
          const id = await Promise.race([pgid, new Promise<null>((r) => setTimeout(() => r(null), 5_000).unref())]);
          if (id !== null) await this.killGroup(client, id);
          abandoned = true;
          channel?.close();
        })().finally(() => reject(op.reason));
      };
      op.addEventListener('abort', onAbort, { once: true });

      const onExit = (c: number | null, sig?: string): void => {
        exited = true;
        code = typeof c === 'number' ? c : null;
        signal = sig ? (sig.startsWith('SIG') ? sig : `SIG${sig}`) : null;
      };
      this.openExec(client, remoteCommand(script, marker), onExit).then((ch) => {
        channel = ch;
        if (abandoned) ch.close(); // opened after an abort gave up on it
        ch.on('data', (d: Buffer) => stdoutParser.push(d));
        ch.stderr.on('data', (d: Buffer) => stderrParser.push(d));
        // 'close' waits for stdout's end but not stderr's: wait for both before reading the tails.
        let pending = 2;
        const done = () => {
          if (--pending > 0) return;
          stdoutParser.end();
          stderrParser.end();
          op.removeEventListener('abort', onAbort);
          if (settled) return;
          settled = true;
          if (!exited) {
            // OpenSSH always reports exit-status/exit-signal before closing; without it the connection died.
            reject(new LlmgwError('NODE_UNREACHABLE', `node ${this.node}: connection lost while the command ran (it may or may not have completed)`, { node: this.node }));
            return;
          }
          resolve({ code, signal, stdout: out.toString(), stderr: err.toString() });
        };
        ch.once('close', done);
        finished(ch.stderr, () => done());
        ch.end(stdin === undefined ? undefined : Buffer.from(stdin));
      }, (e: unknown) => {
        gotPgid(null);
        op.removeEventListener('abort', onAbort);
        if (settled) return;
        settled = true;
        reject(e);
      });
    });
  }

  /**
   * Kill a remote process group from a second channel; bounded (5 s), best-effort (the connection
   * may be gone). The kill channel bypasses the channel limit; if sshd refuses it (MaxSessions
   * reached by other runs) it is retried while the deadline allows.
   */
  private async killGroup(client: Client, pgid: number): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline) {
      let ch: ClientChannel;
      try {
        ch = await this.openExec(client, `kill -s KILL -- -${pgid}`);
      } catch (e) {
        if (e instanceof ConnectionGone) return;
        await new Promise((r) => setTimeout(r, 200));
        continue;
      }
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(0, deadline - Date.now()));
        ch.on('data', () => {}).once('close', () => { clearTimeout(t); resolve(); });
        ch.stderr.on('data', () => {});
        ch.end();
      });
      return;
    }
  }

  private openSftp(client: Client): Promise<SFTPWrapper> {
    return openAgainWhileRefused(() => this.openSftpOnce(client));
  }

  private openSftpOnce(client: Client): Promise<SFTPWrapper> {
    return new Promise((resolve, reject) => {
      try {
        client.sftp((err, sftp) => {
          if (!err) resolve(sftp);
          else if (isConnectionGone(err)) reject(new ConnectionGone(err.message));
          else reject(new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: cannot open an sftp channel: ${err.message}`, { node: this.node }, { cause: err }));
        });
      } catch (e) {
        reject(isConnectionGone(e) ? new ConnectionGone(errText(e)) : e);
      }
    });
  }

  private async sftpUpload(client: Client, localPath: string, remotePath: string, mode: number, op: AbortSignal): Promise<void> {
    const sftp = await raceAbort(this.openSftp(client), op);
    const tmp = tempName(remotePath);
    const call = (f: (cb: (e: Error | null | undefined) => void) => void): Promise<void> =>
      raceAbort(new Promise<void>((resolve, reject) => f((e) => (e ? reject(e) : resolve()))), op);
    try {
      await call((cb) => sftp.fastPut(localPath, tmp, { mode: 0o600 }, cb));
      await call((cb) => sftp.chmod(tmp, mode, cb)); // the open() mode is subject to the remote umask
      try {
        await call((cb) => sftp.ext_openssh_rename(tmp, remotePath, cb)); // throws synchronously when unsupported
      } catch (e) {
        if (op.aborted) throw e;
        // Plain SFTP rename fails when the target exists: remove it first (not atomic; only without posix-rename).
        await call((cb) => sftp.unlink(remotePath, cb)).catch(() => {});
        await call((cb) => sftp.rename(tmp, remotePath, cb));
      }
    } catch (e) {
      // Best-effort removal of the partial temp file (bounded: the connection may be gone).
      await new Promise<void>((r) => { setTimeout(r, 1_000).unref(); sftp.unlink(tmp, () => r()); });
      if (op.aborted) throw op.reason;
      throw new LlmgwError('NODE_COMMAND_FAILED', `node ${this.node}: upload ${localPath} to ${remotePath} failed: ${errText(e)}`, { node: this.node, localPath, remotePath }, { cause: e });
    } finally {
      sftp.end();
    }
  }
}

/** Delays between tries of a channel open sshd refused (about 1.5 s in all). */
const REFUSED_OPEN_RETRY_MS = [50, 100, 200, 400, 800] as const;

/**
 * A channel open that sshd refused ("Channel open failure", e.g. "no more sessions" in its log), tried
 * again after a short wait. The channel limit keeps this client under MaxSessions, but sshd frees a
 * finished session only when it collects the closed channel, after it has handled the packets read
 * with the close: a new open sent right after several channels closed together can meet their
 * sessions still counted (seen with 8 runs ending at once under load, MaxSessions 10).
 */
async function openAgainWhileRefused<T>(open: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await open();
    } catch (e) {
      const refused = e instanceof LlmgwError && /Channel open failure/i.test(String((e.cause as Error | undefined)?.message ?? ''));
      const wait = REFUSED_OPEN_RETRY_MS[attempt];
      if (!refused || wait === undefined) throw e;
      await new Promise((r) => setTimeout(r, wait));
    }
  }
}
