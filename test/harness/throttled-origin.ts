/**
 * An HTTP origin serving one file slowly (bytes per second), with HEAD and byte ranges, so a
 * download (no Range, or `bytes=N-`) is in progress long enough to cut the network under it;
 * bounded ranges (header reads) are served at once. Records each GET's range and
 * the bytes sent per response. With `holdAt`, a download stops sending at that byte of the file
 * until `release()` (the connection stays open, as a stalled server's does), so a test can act
 * while the download is known to be in progress, whatever the machine's speed.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ThrottledOrigin {
  readonly url: string;
  /** Every GET: its Range header ('' for none) and the bytes sent so far in its response. */
  readonly gets: { range: string; sent: number; done: boolean }[];
  /** True while some download waits at `holdAt`. */
  readonly holding: boolean;
  /** Let every download held at `holdAt` (now or later) go on. */
  release(): void;
  /** Close the connection of every download held at `holdAt` now, mid-body (the client sees a short transfer). */
  dropHeld(): number;
  close(): Promise<void>;
}

export async function startThrottledOrigin(file: string, opts: { bytesPerSecond: number; path?: string; holdAt?: number }): Promise<ThrottledOrigin> {
  const data = readFileSync(file);
  const path = opts.path ?? '/model.gguf';
  const gets: ThrottledOrigin['gets'] = [];
  let released = opts.holdAt === undefined;
  const held = new Set<() => void>();
  const tickMs = 50;
  const perTick = Math.max(1, Math.floor((opts.bytesPerSecond * tickMs) / 1000));
  const server: Server = createServer((req, res) => {
    if (req.url !== path) {
      res.writeHead(404).end();
      return;
    }
    const m = /^bytes=(\d+)-(\d*)$/.exec(String(req.headers.range ?? ''));
    const start = m ? Number(m[1]) : 0;
    const end = m && m[2] ? Math.min(Number(m[2]), data.length - 1) : data.length - 1;
    if (start >= data.length) {
      res.writeHead(416, { 'content-range': `bytes */${data.length}` }).end();
      return;
    }
    const headers: Record<string, string | number> = { 'content-length': end - start + 1, 'accept-ranges': 'bytes' };
    if (m) headers['content-range'] = `bytes ${start}-${end}/${data.length}`;
    res.writeHead(m ? 206 : 200, headers);
    if (req.method === 'HEAD') {
      res.end();
      return;
    }
    const g = { range: String(req.headers.range ?? ''), sent: 0, done: false };
    gets.push(g);
    let at = start;
    const drop = (): void => void res.destroy();
    // downloads (no range, or an open-ended one as `curl -C -` sends) are throttled; bounded range
    // reads (a GGUF header) go at full speed
    if (m && m[2]) {
      res.end(data.subarray(start, end + 1));
      g.sent = end - start + 1;
      g.done = true;
      return;
    }
    const timer = setInterval(() => {
      if (res.destroyed) {
        clearInterval(timer);
        return;
      }
      const gate = released ? end + 1 : opts.holdAt!;
      if (at >= gate) {
        held.add(drop);
        return;
      }
      held.delete(drop);
      const next = Math.min(end + 1, gate, at + perTick);
      res.write(data.subarray(at, next));
      g.sent += next - at;
      at = next;
      if (at > end) {
        clearInterval(timer);
        g.done = true;
        res.end();
      }
    }, tickMs);
    res.on('close', () => {
      clearInterval(timer);
      held.delete(drop);
    });
  });
  server.keepAliveTimeout = 500;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${path}`,
    gets,
    get holding() {
      return held.size > 0;
    },
    release() {
      released = true;
    },
    dropHeld() {
      const n = held.size;
      for (const d of [...held]) d();
      held.clear();
      return n;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
