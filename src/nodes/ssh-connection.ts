/**
 * One node's ssh connection (ssh2): opened lazily, shared by every channel (exec, sftp), reconnected
 * after a drop with backoff between failed connects, channels bounded; the host key pinned
 * (ssh-hostkey.ts). The commands that run over it are ssh.ts's. ssh2 is imported at the first
 * connect: a controller without ssh nodes does not load it (its crypto, a wasm poly1305 among it:
 * ~15 MB of RSS).
 */
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { Logger } from 'pino';
import type { Client, ConnectConfig } from 'ssh2';
import { LlmgwError, type ReasonCode } from '../errors/catalogue.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import { DEFAULT_TIMEOUTS, errText, raceAbort, type ShellTimeouts } from './shell.js';
import { fingerprint, hostKeyAlgorithms, keyTypeOf, NO_MATCHING_HOST_KEY, parseHostKey, type PinnedKey } from './ssh-hostkey.js';

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

/** A file name inside the secrets dir: no directories, no dot names. */
export function validIdentityName(name: string): boolean {
  return name.length > 0 && name !== '.' && name !== '..' && !name.includes('/') && !name.includes('\0') && basename(name) === name;
}

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
    if (this.closed) throw new LlmgwError('NODE_UNREACHABLE', `node ${this.node.name}: ssh shell is closed`, { node: this.node.name });
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

    const { Client } = await import('ssh2');
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
        if (this.closed) { client.end(); reject(new LlmgwError('NODE_UNREACHABLE', `node ${node.name}: ssh shell is closed`, { node: node.name })); return; }
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
