/**
 * The usage log (`llmgw serve --usage-log FILE`): one JSON line per request —
 * `{"time","key","model","replica","status","reason","duration_ms","prompt_tokens","cached_tokens","completion_tokens","ended_early"}`
 * (`ended_early`: the request ended before its response did, its tokens are what was seen of it)
 * (the key's name, never its value; nothing of a prompt or a completion) — appended to FILE.
 *
 * Lines are buffered in memory and written with one append and one fsync per batch, at most
 * `flushMs` (1 s) after the first line of the batch, so a SIGKILL of the controller loses at most the
 * last second. When FILE reaches `maxBytes` it is renamed to FILE.1 (FILE.1 to FILE.2 …, keeping
 * `keep` files) and a new FILE is started. A failed write is logged and its lines dropped (counted in
 * the log message), the router goes on.
 */
import { closeSync, fsyncSync, openSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import type { UsageRecord, UsageSink } from './usage.js';

export interface UsageLogOptions {
  readonly path: string;
  /** Rotate when the file would grow past this (default 64 MiB). */
  readonly maxBytes?: number;
  /** Rotated files kept besides FILE (default 5). */
  readonly keep?: number;
  /** Longest a line waits in memory (default 1000 ms). */
  readonly flushMs?: number;
  readonly log?: { error(obj: object, msg: string): void };
}

/** A record as its log line (with the newline). */
export function usageLine(r: UsageRecord): string {
  return (
    JSON.stringify({
      time: new Date(r.time).toISOString(),
      key: r.key,
      model: r.model,
      replica: r.replica,
      status: r.status,
      reason: r.reason,
      duration_ms: Math.round(r.durationSeconds * 1e6) / 1e3,
      prompt_tokens: r.tokens.prompt,
      cached_tokens: r.tokens.cached,
      completion_tokens: r.tokens.completion,
      ended_early: r.endedEarly === true,
    }) + '\n'
  );
}

export class UsageLog implements UsageSink {
  private readonly maxBytes: number;
  private readonly keep: number;
  private readonly flushMs: number;
  private lines: string[] = [];
  private timer: NodeJS.Timeout | null = null;
  private fd: number;
  private size: number;
  private closed = false;

  constructor(private readonly o: UsageLogOptions) {
    this.maxBytes = o.maxBytes ?? 64 * 1024 * 1024;
    this.keep = Math.max(1, o.keep ?? 5);
    this.flushMs = o.flushMs ?? 1000;
    this.fd = openSync(o.path, 'a', 0o600);
    this.size = statSync(o.path).size;
  }

  record(r: UsageRecord): void {
    if (this.closed) return;
    this.lines.push(usageLine(r));
    if (this.timer === null) {
      this.timer = setTimeout(() => this.flush(), this.flushMs);
      this.timer.unref();
    }
  }

  /** Writes and fsyncs what is buffered. */
  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.lines.length === 0) return;
    const text = this.lines.join('');
    const n = this.lines.length;
    this.lines = [];
    try {
      const bytes = Buffer.from(text, 'utf8');
      if (this.size > 0 && this.size + bytes.length > this.maxBytes) this.rotate();
      let off = 0;
      while (off < bytes.length) off += writeSync(this.fd, bytes, off);
      fsyncSync(this.fd);
      this.size += bytes.length;
    } catch (err) {
      this.o.log?.error({ err, path: this.o.path, lines: n }, 'usage log: write failed; lines dropped');
    }
  }

  private rotate(): void {
    closeSync(this.fd);
    const p = this.o.path;
    rmSync(`${p}.${this.keep}`, { force: true });
    for (let i = this.keep - 1; i >= 1; i--) {
      try {
        renameSync(`${p}.${i}`, `${p}.${i + 1}`);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
      }
    }
    renameSync(p, `${p}.1`);
    this.fd = openSync(p, 'a', 0o600);
    this.size = 0;
  }

  /** Flushes and closes the file. */
  close(): void {
    if (this.closed) return;
    this.flush();
    this.closed = true;
    closeSync(this.fd);
  }
}
