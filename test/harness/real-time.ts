/** The real clock and timers for tests of HA shells against real etcd (src/serve/serve.ts makes its own). */
import type { ShellTime } from '../../src/ha/shell-time.js';
import { nodeTimers } from '../../src/reconciler/loop.js';

export const realTime: ShellTime = { now: () => Date.now(), timers: nodeTimers };
