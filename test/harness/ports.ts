/**
 * Ports for the real components a test starts. Listeners (sshd, etcd, llmgw serve) bind a port
 * found free a moment ago in 30000–32767; replica port ranges for nodes are cut from 10000–29999
 * (both below Linux's ephemeral range) by the test process's pid and a counter, so test files that run side by side —
 * and several checkouts testing on one machine — do not hand their nodes the same ports.
 */
import { createServer } from 'node:net';

const handedOut = new Set<number>();

/** Whether `port` can be bound on 127.0.0.1 right now (bound and released). */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A TCP port for a listener a test starts, free a moment ago. It is taken from 30000–32767: above
 * the replica ranges and below Linux's ephemeral range (32768–60999), so no outgoing connection of
 * any process can be handed it between this check and the listener's bind (a port the OS chose with
 * `listen(0)` and released could be, and `llmgw serve` then failed to listen: a CI run lost a test
 * that way). A port is handed out once per test process.
 */
export async function freePort(): Promise<number> {
  for (let tries = 0; tries < 400; tries++) {
    const port = 30_000 + Math.floor(Math.random() * 2768);
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    if (await bindable(port)) return port;
  }
  throw new Error('freePort: no free port in 30000-32767 after 400 tries');
}

let rangeCounter = 0;

/** `size` replica ports for one node of this test process (10 ranges of up to 20 per process before they repeat). */
export function replicaPortRange(size = 20): { from: number; to: number } {
  const n = Math.min(size, 20);
  const from = 10_000 + (process.pid % 100) * 200 + (rangeCounter++ % 10) * 20;
  return { from, to: from + n - 1 };
}
