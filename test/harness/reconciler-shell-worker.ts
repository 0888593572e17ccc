/**
 * Runs the failing-model scenario (reconciler-shell-runs.ts) for seeds `from`..`to` in a worker
 * thread and posts null, or the first failure's seed and stack. In a worker, node's test runner's
 * async hook (Node 20: every promise made under a test is tracked) is not installed: the 200 runs'
 * promises cost a third less.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { scenario } from './reconciler-shell-runs.js';

const { from, to } = workerData as { from: number; to: number };
let failure: string | null = null;
for (let seed = from; seed <= to && failure === null; seed++) {
  try {
    await scenario(seed);
  } catch (e) {
    failure = `seed ${seed}: ${(e as Error).stack ?? String(e)}`;
  }
}
parentPort!.postMessage(failure);
