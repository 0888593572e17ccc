/**
 * Ports for the real components a test starts. Listeners (sshd, etcd, llmgw serve) bind a port the
 * OS chose a moment ago; replica port ranges for nodes are cut from 10000–29999 (below Linux's
 * ephemeral range) by the test process's pid and a counter, so test files that run side by side —
 * and several checkouts testing on one machine — do not hand their nodes the same ports.
 */
import { createServer } from 'node:net';

/** A TCP port that was free a moment ago (bound to port 0 on 127.0.0.1 and released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => (port ? resolve(port) : reject(new Error('freePort: no port'))));
    });
  });
}

let rangeCounter = 0;

/** `size` replica ports for one node of this test process (10 ranges of up to 20 per process before they repeat). */
export function replicaPortRange(size = 20): { from: number; to: number } {
  const n = Math.min(size, 20);
  const from = 10_000 + (process.pid % 100) * 200 + (rangeCounter++ % 10) * 20;
  return { from, to: from + n - 1 };
}
