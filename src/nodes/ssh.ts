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
import { createHash, randomBytes } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { finished } from 'node:stream';
import type { Logger } from 'pino';
import { Client, type ClientChannel, type ConnectConfig, type SFTPWrapper, type ServerHostKeyAlgorithm } from 'ssh2';
import { LlmgwError, type ReasonCode } from '../errors/catalogue.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import {
  checkScript, DEFAULT_OUTPUT_CAP, DEFAULT_TIMEOUTS, OutputTail, raceAbort, tempName, withDeadline, type ShellTimeouts,
} from './local.js';
import { shq, type ExecOptions, type ExecResult, type Shell } from './shell.js';

export interface SshOptions {
  /** Directory holding private keys; NodeSpec.identity names a file in it. */
  readonly secretsDir: string;
  /** connect/disconnect events only; never key material. */
  readonly logger?: Logger;
  readonly timeouts?: ShellTimeouts;
  /** ssh keepalive: probe every keepaliveIntervalMs (default 15 s), drop after keepaliveCountMax (3) unanswered. */
  readonly keepaliveIntervalMs?: number;
  readonly keepaliveCountMax?: number;
  /** Delay before reconnecting after a failed connect: initialMs doubling to maxMs (default 1 s → 30 s); reset on success. */
  readonly backoff?: { readonly initialMs: number; readonly maxMs: number };
  /** Channels open at once on the connection (default 8; OpenSSH's MaxSessions defaults to 10). */
  readonly maxChannels?: number;
  readonly outputCapBytes?: number;
  /** The clock the connect backoff reads (ms since the epoch); Date.now by default. */
  readonly clock?: () => number;
}

// ---------------------------------------------------------------- host keys

export interface PinnedKey {
  readonly type: string;
  readonly blob: Buffer;
}

/** Parse "<type> <base64> [comment]" (known_hosts style, without the host). Null when malformed. */
export function parseHostKey(text: string): PinnedKey | null {
  const m = /^\s*(\S+)\s+([A-Za-z0-9+/]+={0,2})(?:\s.*)?$/.exec(text);
  if (!m) return null;
  const type = m[1]!;
  const blob = Buffer.from(m[2]!, 'base64');
  // The blob starts with its own type name (uint32 length + string); it must agree.
  if (blob.length < 4) return null;
  const n = blob.readUInt32BE(0);
  if (blob.length < 4 + n || blob.subarray(4, 4 + n).toString('latin1') !== type) return null;
  return { type, blob };
}

/** OpenSSH-style fingerprint: "SHA256:" + unpadded base64 of sha256(key blob). */
export function fingerprint(blob: Buffer): string {
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

function keyTypeOf(blob: Buffer): string {
  if (blob.length < 4) return 'unknown';
  const n = blob.readUInt32BE(0);
  return blob.length >= 4 + n ? blob.subarray(4, 4 + n).toString('latin1') : 'unknown';
}

/** Host key algorithms to offer so the server presents the pinned key (not another of its keys). */
function hostKeyAlgorithms(type: string): ServerHostKeyAlgorithm[] | undefined {
  switch (type) {
    case 'ssh-ed25519':
    case 'ecdsa-sha2-nistp256':
    case 'ecdsa-sha2-nistp384':
    case 'ecdsa-sha2-nistp521':
      return [type];
    case 'ssh-rsa':
      return ['rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa'];
    default:
      return undefined;
  }
}

/** A file name inside the secrets dir: no directories, no dot names. */
export function validIdentityName(name: string): boolean {
  return name.length > 0 && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0') && basename(name) === name;
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

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

/** ssh2's handshake error when the server offers none of the host key algorithms asked for (the pinned key's type). */
export const NO_MATCHING_HOST_KEY = /no matching host key format/;

/** Thrown when a channel could not be opened because the connection was gone: safe to retry. */
class ConnectionGone extends Error {}

// ---------------------------------------------------------------- connection manager

/** One node's ssh connection: lazy, shared, reconnecting with backoff. */
export class SshConnection {
  private client: Client | null = null;
  private connecting: Promise<Client> | null = null;
  private failures = 0;
  private nextAttemptAt = 0;
  private lastError: LlmgwError | null = null;
  private closed = false;
  private active = 0;
  private readonly waiters: Array<() => void> = [];
  private connectCount = 0;

  private readonly now: () => number;

  constructor(readonly node: NodeSpec, private readonly opts: SshOptions) {
    this.now = opts.clock ?? Date.now;
  }

  /** Successful connects so far (1 for a connection that never dropped). */
  get connects(): number { return this.connectCount; }
  get connected(): boolean { return this.client !== null; }

  /** The ready client, connecting if needed. Concurrent callers share one connect. */
  async get(op: AbortSignal): Promise<Client> {
    if (this.closed) throw new Error(`node ${this.node.name}: ssh shell is closed`);
    if (this.client) return this.client;
    if (!this.connecting) {
      const wait = this.nextAttemptAt - this.now();
      if (wait > 0 && this.lastError) {
        const at = new Date(this.nextAttemptAt).toISOString();
        throw new LlmgwError(this.lastError.code, `${this.lastError.message} (backing off; next attempt at ${at})`,
          { ...this.lastError.detail, nextAttemptAt: at });
      }
      this.connecting = this.connect().finally(() => { this.connecting = null; });
    }
    return raceAbort(this.connecting, op);
  }

  /** Forget a client whose connection turned out to be gone. */
  drop(client: Client): void {
    if (this.client === client) this.client = null;
    client.destroy();
  }

  /** Wait for a free channel slot; returns its release function. */
  async acquire(op: AbortSignal): Promise<() => void> {
    const max = this.opts.maxChannels ?? 8;
    if (this.active >= max) {
      await new Promise<void>((resolve, reject) => {
        const go = () => { op.removeEventListener('abort', onAbort); resolve(); };
        const onAbort = () => {
          const i = this.waiters.indexOf(go);
          if (i >= 0) this.waiters.splice(i, 1);
          reject(op.reason);
        };
        this.waiters.push(go);
        op.addEventListener('abort', onAbort, { once: true });
      });
    } else {
      this.active++;
    }
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const next = this.waiters.shift();
      if (next) next(); // the slot passes to the next waiter
      else this.active--;
    };
  }

  async close(): Promise<void> {
    this.closed = true;
    const c = this.client ?? (this.connecting ? await this.connecting.catch(() => null) : null);
    this.client = null;
    if (!c) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(() => { c.destroy(); resolve(); }, 2_000);
      c.once('close', () => { clearTimeout(t); resolve(); });
      c.end();
    });
  }

  private fail(code: ReasonCode, message: string, detail: Record<string, unknown>, cause?: unknown, backoff = true): LlmgwError {
    const err = new LlmgwError(code, message, { node: this.node.name, host: this.node.host, port: this.node.port, ...detail }, { cause });
    if (backoff) {
      const b = this.opts.backoff ?? { initialMs: 1_000, maxMs: 30_000 };
      this.failures++;
      const delay = Math.min(b.initialMs * 2 ** (this.failures - 1), b.maxMs);
      this.nextAttemptAt = this.now() + delay;
      this.lastError = err;
      this.opts.logger?.warn({ node: this.node.name, code, err: message, retryInMs: delay }, 'ssh connect failed');
    }
    return err;
  }

  private async privateKey(): Promise<Buffer> {
    const { identity, name } = this.node;
    if (identity === null || !validIdentityName(identity)) {
      throw this.fail('SECRET_NOT_FOUND', `node ${name}: identity ${JSON.stringify(identity)} is not a key file name in the secrets dir`, { identity }, undefined, false);
    }
    try {
      return await readFile(join(this.opts.secretsDir, identity));
    } catch (e) {
      throw this.fail('SECRET_NOT_FOUND', `node ${name}: identity key "${identity}" not found in the secrets dir`, { identity }, e, false);
    }
  }

  private async connect(): Promise<Client> {
    const node = this.node;
    const privateKey = await this.privateKey();
    const pinned = node.hostKey === null ? null : parseHostKey(node.hostKey);
    let presented: Buffer | null = null;

    const config: ConnectConfig = {
      host: node.host,
      port: node.port,
      username: node.user,
      privateKey,
      readyTimeout: this.opts.timeouts?.connectMs ?? DEFAULT_TIMEOUTS.connectMs,
      keepaliveInterval: this.opts.keepaliveIntervalMs ?? 15_000,
      keepaliveCountMax: this.opts.keepaliveCountMax ?? 3,
      hostVerifier: (key: Buffer): boolean => {
        presented = Buffer.from(key);
        return pinned !== null && key.equals(pinned.blob);
      },
    };
    const algos = pinned ? hostKeyAlgorithms(pinned.type) : undefined;
    if (algos) config.algorithms = { serverHostKey: algos };

    const client = new Client();
    return new Promise<Client>((resolve, reject) => {
      let ready = false;
      const onError = (e: Error & { level?: string; code?: string }) => {
        if (ready) {
          this.opts.logger?.warn({ node: node.name, err: e.message }, 'ssh connection error');
          return; // 'close' follows
        }
        ready = true; // settle once
        client.destroy();
        reject(this.mapConnectError(e, pinned, presented));
      };
      client.on('error', onError);
      client.once('ready', () => {
        ready = true;
        if (this.closed) { client.end(); reject(new Error(`node ${node.name}: ssh shell is closed`)); return; }
        this.client = client;
        this.connectCount++;
        this.failures = 0;
        this.nextAttemptAt = 0;
        this.lastError = null;
        this.opts.logger?.info({ node: node.name, host: node.host, port: node.port }, 'ssh connected');
        resolve(client);
      });
      client.once('close', () => {
        if (this.client === client) {
          this.client = null;
          this.opts.logger?.info({ node: node.name }, 'ssh disconnected');
        }
        if (!ready) onError(Object.assign(new Error('connection closed during handshake'), { level: 'client-socket' }));
      });
      try {
        client.connect(config);
      } catch (e) {
        // ssh2 validates the key synchronously ("Cannot parse privateKey: …"); its messages carry no key material.
        ready = true;
        reject(this.fail('NODE_AUTH_FAILED', `node ${node.name}: identity key "${node.identity}" is unusable: ${errText(e)}`, { identity: node.identity }, undefined, false));
      }
    });
  }

  private mapConnectError(e: Error & { level?: string; code?: string }, pinned: PinnedKey | null, presented: Buffer | null): LlmgwError {
    const node = this.node;
    if (presented !== null && (pinned === null || !presented.equals(pinned.blob))) {
      const got = `${keyTypeOf(presented)} ${fingerprint(presented)}`;
      const presentedKey = `${keyTypeOf(presented)} ${presented.toString('base64')}`;
      const message = pinned === null
        ? `node ${node.name}: refusing host key ${got}: no valid host key is pinned in ${node.file} (host_key ${JSON.stringify(node.hostKey)})`
        : `node ${node.name}: host key mismatch: expected ${pinned.type} ${fingerprint(pinned.blob)}, presented ${got}`;
      return this.fail('NODE_HOST_KEY_MISMATCH', message, {
        expected: pinned ? fingerprint(pinned.blob) : null, presented: fingerprint(presented), presentedKey,
      }, e);
    }
    if (presented === null && pinned !== null && NO_MATCHING_HOST_KEY.test(e.message)) {
      return this.fail('NODE_HOST_KEY_MISMATCH', `node ${node.name}: the node offers no ${pinned.type} host key; expected ${pinned.type} ${fingerprint(pinned.blob)}`,
        { expected: fingerprint(pinned.blob), presented: null }, e);
    }
    if (e.level === 'client-authentication') {
      return this.fail('NODE_AUTH_FAILED', `node ${node.name}: ${node.user}@${node.host}:${node.port} refused key "${node.identity}"`, { user: node.user, identity: node.identity }, e);
    }
    const why = e.level === 'client-timeout' ? `no ssh handshake within ${this.opts.timeouts?.connectMs ?? DEFAULT_TIMEOUTS.connectMs} ms` : (e.code ?? e.message);
    return this.fail('NODE_UNREACHABLE', `node ${node.name}: cannot connect to ${node.host}:${node.port}: ${why}`, { cause: e.code ?? e.message }, e);
  }
}

// ---------------------------------------------------------------- shell

/**
 * The exact string sent in the ssh exec request for a script (see the module comment). `marker`
 * ([a-z0-9:-] only) starts a line on stdout and, followed by the process group id, on stderr;
 * whatever the login shell's rc files print before it is dropped.
 */
export function remoteCommand(script: string, marker: string): string {
  if (!/^[a-z0-9:-]+$/.test(marker)) throw new Error('remoteCommand: bad marker');
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
