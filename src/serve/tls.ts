/**
 * TLS files that are re-read when they change: a renewed certificate is served without a restart.
 * A half-written or broken pair is refused (logged) and the previous one stays in use.
 */
import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import { createSecureContext } from 'node:tls';
import type { Logger } from 'pino';

export interface TlsPair {
  readonly cert: Buffer;
  readonly key: Buffer;
}

export interface SecureContextTarget {
  setSecureContext(options: { cert: Buffer; key: Buffer }): void;
}

export class ReloadingTls {
  private pair: TlsPair;
  private readonly targets: SecureContextTarget[] = [];
  private watching = false;

  constructor(
    private readonly certPath: string,
    private readonly keyPath: string,
    private readonly log: Logger,
    private readonly intervalMs = 1000,
  ) {
    this.pair = this.read();
  }

  /** The current pair; throws when the files do not hold a usable pair. */
  private read(): TlsPair {
    const pair = { cert: readFileSync(this.certPath), key: readFileSync(this.keyPath) };
    createSecureContext(pair); // validates that key and certificate belong together
    return pair;
  }

  get current(): TlsPair {
    return this.pair;
  }

  /** Servers whose certificate follows the files. */
  attach(target: SecureContextTarget): void {
    this.targets.push(target);
    if (this.watching) return;
    this.watching = true;
    const onChange = (): void => {
      this.reload();
    };
    watchFile(this.certPath, { interval: this.intervalMs }, onChange);
    watchFile(this.keyPath, { interval: this.intervalMs }, onChange);
  }

  reload(): boolean {
    let next: TlsPair;
    try {
      next = this.read();
    } catch (e) {
      this.log.warn({ cert: this.certPath, key: this.keyPath, err: e instanceof Error ? e.message : String(e) }, 'TLS files unreadable or mismatched; keeping the current certificate');
      return false;
    }
    if (next.cert.equals(this.pair.cert) && next.key.equals(this.pair.key)) return false;
    this.pair = next;
    for (const t of this.targets) t.setSecureContext({ cert: next.cert, key: next.key });
    this.log.info({ cert: this.certPath }, 'TLS certificate reloaded');
    return true;
  }

  close(): void {
    if (!this.watching) return;
    unwatchFile(this.certPath);
    unwatchFile(this.keyPath);
    this.watching = false;
  }
}
