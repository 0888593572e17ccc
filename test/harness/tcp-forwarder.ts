/**
 * A TCP forwarder for partition tests: clients connect to its port, it relays to a target (a real
 * sshd). `cut()` destroys every relayed connection at both ends and refuses new ones until
 * `restore()`, without touching the target or the processes it runs: what a network partition
 * does, unlike killing sshd (whose session processes would die with it).
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
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpForwarder(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpForwarder> {
  const pairs = new Set<[Socket, Socket]>();
  let down = false;
  let accepted = 0;
  let refused = 0;
  let bytesDown = 0;
  const server: Server = createServer((client) => {
    if (down) {
      refused++;
      client.destroy();
      return;
    }
    accepted++;
    const upstream = connect(targetPort, targetHost);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = (): void => {
      pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    upstream.on('data', (d: Buffer) => (bytesDown += d.length));
    client.pipe(upstream);
    upstream.pipe(client);
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const cut = (): void => {
    down = true;
    for (const [a, b] of pairs) {
      a.destroy();
      b.destroy();
    }
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
    restore() {
      down = false;
    },
    async close() {
      cut();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
