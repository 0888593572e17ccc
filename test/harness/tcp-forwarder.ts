/**
 * A TCP forwarder for partition tests: clients connect to its port, it relays to a target (a real
 * sshd, a real etcd). Two kinds of partition, neither touching the target or the processes it runs:
 * - `cut()` destroys every relayed connection at both ends and refuses new ones until `restore()`:
 *   what a partition the peers notice does (unlike killing sshd, whose session processes would die);
 * - `stall()` stops relaying in both directions but keeps every socket open, and holds new
 *   connections accepted but unconnected: packets vanish, nobody is told. gRPC does not notice a
 *   stalled connection until its own deadlines or keepalive pings fail. `restore()` relays again
 *   what was held (TCP after a healed partition), and connects the held clients.
 * And a slow link: `delayDown(ms)` holds every byte from the target for `ms` before the client gets
 * it, in order (open connections and new ones): a client whose etcd watch lags by that much.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface TcpForwarder {
  readonly port: number;
  /** Connections relayed so far. */
  readonly accepted: number;
  /** Connections refused while cut. */
  readonly refused: number;
  /** Bytes relayed from the target to clients so far. */
  readonly bytesDown: number;
  cut(): void;
  /** Bytes from the target reach the client `ms` later, in order, on every connection from now on (open ones too). */
  delayDown(ms: number): void;
  /** Stop relaying, keep the sockets open (see above). */
  stall(): void;
  restore(): void;
  close(): Promise<void>;
}

interface Pair {
  readonly client: Socket;
  upstream: Socket | null;
  /** Bytes from the target are held this long (set when it was dialled); 0: piped. */
  delayMs: number;
  /** The delayed relay is attached (once: a restore resumes it). */
  delaying: boolean;
}

/** Relays `from` to `to`, each chunk `ms` after it arrived, in order. */
function delayedRelay(from: Socket, to: Socket, ms: number): void {
  const queue: { readonly at: number; readonly data: Buffer }[] = [];
  let timer: NodeJS.Timeout | null = null;
  const flush = (): void => {
    timer = null;
    const now = Date.now();
    while (queue.length > 0 && queue[0]!.at <= now) {
      const { data } = queue.shift()!;
      if (!to.destroyed) to.write(data);
    }
    if (queue.length > 0) timer = setTimeout(flush, queue[0]!.at - now);
  };
  from.on('data', (data: Buffer) => {
    queue.push({ at: Date.now() + ms, data });
    timer ??= setTimeout(flush, ms);
  });
  to.on('close', () => {
    if (timer) clearTimeout(timer);
  });
}

export async function startTcpForwarder(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpForwarder> {
  const pairs = new Set<Pair>();
  let down = false;
  let stalled = false;
  let accepted = 0;
  let refused = 0;
  let bytesDown = 0;
  let delayMs = 0;
  const end = (pair: Pair): void => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream?.destroy();
  };
  const relay = (pair: Pair): void => {
    const up = pair.upstream!;
    pair.client.pipe(up);
    if (pair.delayMs === 0) up.pipe(pair.client);
    else if (!pair.delaying) {
      pair.delaying = true;
      delayedRelay(up, pair.client, pair.delayMs);
    } else up.resume();
  };
  const hold = (pair: Pair): void => {
    pair.client.unpipe();
    pair.upstream?.unpipe();
    pair.client.pause();
    pair.upstream?.pause();
  };
  const dial = (pair: Pair): void => {
    const upstream = connect(targetPort, targetHost);
    pair.upstream = upstream;
    upstream.on('data', (d: Buffer) => (bytesDown += d.length));
    upstream.on('error', () => end(pair)).on('close', () => end(pair));
    relay(pair);
  };
  const server: Server = createServer((client) => {
    if (down) {
      refused++;
      client.destroy();
      return;
    }
    accepted++;
    const pair: Pair = { client, upstream: null, delayMs, delaying: false };
    pairs.add(pair);
    client.on('error', () => end(pair)).on('close', () => end(pair));
    if (stalled) client.pause();
    else dial(pair);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const cut = (): void => {
    down = true;
    stalled = false;
    for (const pair of [...pairs]) end(pair);
    pairs.clear();
  };
  return {
    port: (server.address() as AddressInfo).port,
    get accepted() {
      return accepted;
    },
    get refused() {
      return refused;
    },
    get bytesDown() {
      return bytesDown;
    },
    cut,
    delayDown(ms: number) {
      delayMs = ms;
      for (const pair of pairs) {
        if (!pair.upstream || pair.delaying || ms === 0) continue;
        pair.upstream.unpipe(pair.client);
        pair.delayMs = ms;
        pair.delaying = true;
        delayedRelay(pair.upstream, pair.client, ms);
        pair.upstream.resume(); // unpipe left it paused
      }
    },
    stall() {
      if (down) return;
      stalled = true;
      for (const pair of pairs) hold(pair);
    },
    restore() {
      down = false;
      if (!stalled) return;
      stalled = false;
      for (const pair of pairs) {
        if (pair.upstream) relay(pair);
        else dial(pair);
      }
    },
    async close() {
      cut();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
