/** A fleet source that always holds one spec at revision rev1 (fast tests of the reconciler and the HA controller). */
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import type { RefreshResult } from '../../src/git/tracker.js';
import type { FleetSource } from '../../src/reconciler/reconciler.js';
import { ticks } from './fake-node.js';

export class FixedSpec implements FleetSource {
  readonly applied;
  readonly rejected = null;
  readonly lastSyncOk = null;
  readonly lastSyncError = null;
  constructor(spec: FleetSpec) {
    this.applied = { spec, revision: 'rev1', warnings: [], at: new Date(0) };
  }
  async refresh(): Promise<RefreshResult> {
    await ticks(1);
    return { outcome: 'unchanged', head: 'rev1', retries: [], error: null };
  }
}

/** A small deterministic PRNG, so each run's interleaving is varied and reproducible. */
export function rng(seed: number): () => number {
  let x = seed || 1;
  return () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
}
