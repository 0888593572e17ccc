/**
 * One Server-Sent Events client with a bounded buffer. A client that does not read is not queued
 * for: `send` drops it (closes its connection) once more than `maxBufferedBytes` wait in the
 * socket, and `latest` keeps only the newest frame of its kind while the socket is full. A client
 * that went away is noticed by the socket's close (and a heartbeat that finds it gone).
 */
import type { ServerResponse } from 'node:http';

export interface SseOptions {
  /** Bytes the socket may hold unread before the client is dropped. */
  readonly maxBufferedBytes: number;
  /** A comment line this often keeps proxies from timing out and finds gone clients. */
  readonly heartbeatMs: number;
  /** The reconnection delay the client is told (EventSource's `retry:`). */
  readonly retryMs: number;
}

export const DEFAULT_SSE: SseOptions = Object.freeze({ maxBufferedBytes: 256 * 1024, heartbeatMs: 15_000, retryMs: 1_000 });

export type SseEnd = 'gone' | 'slow' | 'closed';

/** A frame: `event:` and optional `id:`, the data as one JSON line. */
export function sseFrame(event: string, data: unknown, id?: number | string): string {
  return `${id !== undefined ? `id: ${id}\n` : ''}event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

export class SseClient {
  private ended: SseEnd | null = null;
  private pending: string | null = null;
  private readonly timer: NodeJS.Timeout;
  private readonly onEnd = new Set<(why: SseEnd) => void>();

  constructor(
    private readonly res: ServerResponse,
    private readonly o: SseOptions = DEFAULT_SSE,
  ) {
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
      'x-content-type-options': 'nosniff',
    });
    res.write(`retry: ${o.retryMs}\n\n`);
    res.on('close', () => this.finish('gone'));
    res.on('drain', () => {
      if (this.pending !== null && !this.res.writableNeedDrain) {
        const f = this.pending;
        this.pending = null;
        this.write(f);
      }
    });
    this.timer = setInterval(() => this.write(': ping\n\n'), o.heartbeatMs);
    this.timer.unref();
  }

  get open(): boolean {
    return this.ended === null;
  }

  /** The socket is full (the client has not read the frames before): a frame now would wait. */
  get behind(): boolean {
    return this.res.writableNeedDrain;
  }

  /** Bytes waiting in the socket. */
  get buffered(): number {
    return this.res.writableLength;
  }

  whenEnded(fn: (why: SseEnd) => void): void {
    if (this.ended) fn(this.ended);
    else this.onEnd.add(fn);
  }

  /** A frame the client must not miss (it is dropped instead when it falls behind). */
  send(frame: string): void {
    this.write(frame);
  }

  /** A frame only the newest of which matters (a whole view): held while the socket is full. */
  latest(frame: string): void {
    if (this.ended) return;
    if (this.res.writableNeedDrain) this.pending = frame;
    else this.write(frame);
  }

  close(): void {
    if (this.ended) return;
    this.res.end();
    this.finish('closed');
  }

  private write(frame: string): void {
    if (this.ended) return;
    if (this.res.writableLength + Buffer.byteLength(frame) > this.o.maxBufferedBytes) {
      // it does not read what it was sent: drop it (it reconnects and asks for what it missed)
      this.finish('slow');
      this.res.destroy();
      return;
    }
    this.res.write(frame);
  }

  private finish(why: SseEnd): void {
    if (this.ended) return;
    this.ended = why;
    this.pending = null;
    clearInterval(this.timer);
    for (const fn of this.onEnd) fn(why);
    this.onEnd.clear();
  }
}
