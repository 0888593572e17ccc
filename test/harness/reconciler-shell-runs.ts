/**
 * The reconciler shell driven with recording fake nodes, a fake clock and fake timers
 * (test/unit/reconciler-shell.test.ts): the fixed spec, a run's setup and world steps, and the
 * failing-model scenario its 200 interleavings run (in worker threads: reconciler-shell-worker.ts).
 */
import { strict as assert } from 'node:assert';
import pino from 'pino';
import type { RetryRequest } from '../../src/git/trailers.js';
import type { RefreshResult } from '../../src/git/tracker.js';
import { backoffMs } from '../../src/reconciler/health.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { DEMAND_START } from '../../src/reconciler/loop.js';
import { Reconciler, type FleetSource } from '../../src/reconciler/reconciler.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from './fake-node.js';
import { specOf } from './reconciler-core.js';

export const spec = await specOf((f) => {
  f['fleet.yaml'] = 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1h\nbackoff: { initial: 1s, max: 4s }\n';
  delete f['models/beta.yaml'];
});
export const S = spec.settings;

class FixedSpec implements FleetSource {
  applied: { spec: FleetSpec; revision: string; warnings: never[]; at: Date };
  constructor(spec: FleetSpec) {
    this.applied = { spec, revision: 'rev1', warnings: [], at: new Date(0) };
  }
  rejected = null;
  lastSyncOk = null;
  lastSyncError = null;
  private pending: RetryRequest[] = [];
  retryOnce(r: RetryRequest): void {
    this.pending.push(r);
  }
  async refresh(): Promise<RefreshResult> {
    await ticks(1);
    const retries = this.pending.splice(0);
    return { outcome: retries.length ? 'applied' : 'unchanged', head: 'rev1', retries, error: null };
  }
}

/** A small deterministic PRNG, so each run's interleaving is varied and reproducible. */
export function rng(seed: number): () => number {
  let x = seed || 1;
  return () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
}

export interface Run {
  readonly r: Reconciler;
  readonly log: FakeFleetLog;
  readonly clock: FakeClock;
  readonly tracker: FixedSpec;
  readonly saved: () => ControllerState;
  readonly nodes: ReadonlyMap<string, FakeNode>;
  /** Steps of the world until `done` holds (or maxSteps); up to triggersPerStep − 1 triggers arrive every step. */
  drive(done: () => boolean, maxSteps?: number, triggersPerStep?: number): Promise<void>;
}

export function setup(seed: number, opts: { adopt?: (nodes: Map<string, FakeNode>) => void; observeMs?: number; saveMs?: number; spec?: FleetSpec } = {}): Run {
  const random = rng(seed);
  const clock = new FakeClock();
  const timers = new FakeTimers(clock);
  const log = new FakeFleetLog();
  const tracker = new FixedSpec(opts.spec ?? spec);
  const report = 1 + Math.floor(random() * 8);
  const nodes = new Map(Object.keys(spec.nodes).map((n) => [n, new FakeNode(n, clock, log, new Set(['alpha']), report, opts.observeMs ?? 0)]));
  opts.adopt?.(nodes);
  let saved: ControllerState = emptyState;
  let n = 0;
  const r = new Reconciler({
    tracker,
    status: null,
    driverFor: (node) => nodes.get(node.name)!,
    stateStore: {
      path: 'memory',
      save: async (s) => {
        saved = s;
        clock.advance(opts.saveMs ?? 0); // a slow disk: time passes after the pass decided
        return true;
      },
    },
    initialState: emptyState,
    engineApiKey: 'k',
    logger: pino({ level: 'silent' }),
    clock: clock.now,
    monotonic: clock.monotonic,
    timers,
    newReplicaId: (model) => `${model}-${++n}`,
  });
  return {
    r,
    log,
    clock,
    tracker,
    saved: () => saved,
    nodes,
    async drive(done, maxSteps = 4000, triggersPerStep = 4) {
      for (let step = 0; step < maxSteps && !done(); step++) {
        const triggers = Math.floor(random() * triggersPerStep);
        // a router's demands: for a start and nothing else (DEMAND_START, decided on the last look) or not
        for (let i = 0; i < triggers; i++) void r.requestPass(random() < 0.5 ? 'demand' : DEMAND_START);
        await ticks(1 + Math.floor(random() * 6));
        clock.advance(100 + Math.floor(random() * 500));
        timers.fire();
      }
    },
  };
}

export const parked = (r: Reconciler): boolean => r.model('alpha')?.parked != null;

/** Every start of `model` from index `from`: one at a time, each at least the backoff after the failure before it. */
export function assertStartsHonourBackoff(run: Run, from: number, count: number, what: string): void {
  const starts = run.log.startsOf('alpha').slice(from);
  const failures = run.log.failures.filter((f) => f.model === 'alpha').slice(from);
  assert.equal(starts.length, count, `${what}: ${starts.length} starts, want ${count}`);
  for (let i = 1; i < starts.length; i++) {
    const gap = starts[i]!.mono - failures[i - 1]!.mono;
    assert.ok(gap >= backoffMs(i, S), `${what}: start ${i + 1} came ${gap} ms after failure ${i}, backoff is ${backoffMs(i, S)} ms`);
  }
  assert.equal(run.log.maxInFlight.get('alpha'), 1, `${what}: two starts of alpha were in flight at once`);
}

export async function scenario(seed: number): Promise<void> {
  const run = setup(seed);
  const { r } = run;
  try {
    await r.start();
    await run.drive(() => parked(r));
    assert.ok(parked(r), `seed ${seed}: alpha never parked`);
    await run.drive(() => false, 40); // a parked model is left alone, however many triggers come
    assertStartsHonourBackoff(run, 0, S.parkAfterFailures, `seed ${seed}`);
    assert.equal(r.model('alpha')!.consecutiveFailures, S.parkAfterFailures);
    assert.equal(run.saved().models.alpha!.health.consecutiveFailures, S.parkAfterFailures, 'the record on disk has the count');
    assert.equal(r.model('gamma')!.phase, 'ready', 'the healthy model is served meanwhile');

    // a Llmgw-Retry: trailer unparks it once: exactly five more starts
    run.tracker.retryOnce({ model: 'alpha', commit: 'c0ffee', content: 'c0ffee0000000000', author: 'op <op@example.com>', timestamp: 0 });
    await run.drive(() => !parked(r), 50);
    await run.drive(() => parked(r));
    await run.drive(() => false, 20);
    assertStartsHonourBackoff(run, S.parkAfterFailures, S.parkAfterFailures, `seed ${seed}, after Llmgw-Retry`);

    // and so does `ctl retry`
    const retried = r.retry('alpha');
    await run.drive(() => !parked(r), 50);
    await retried;
    await run.drive(() => parked(r));
    await run.drive(() => false, 20);
    assertStartsHonourBackoff(run, 2 * S.parkAfterFailures, S.parkAfterFailures, `seed ${seed}, after ctl retry`);
  } finally {
    await r.stop();
  }
}
