/**
 * The whole reconciler shell driven with recording fake nodes, a fake clock and fake timers: a model
 * whose replicas always die is started exactly park_after_failures times, never two at once, each
 * start at least the backoff after the previous failure — while triggers keep arriving as a busy
 * router sends them — then parked; the same after a `Llmgw-Retry:` trailer and after `ctl retry`.
 * Run 200 times over varied interleavings (how long a start takes to report, how many triggers
 * arrive per step), each run in a few milliseconds.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { RetryRequest } from '../../src/git/trailers.js';
import type { RefreshResult } from '../../src/git/tracker.js';
import { backoffMs } from '../../src/reconciler/health.js';
import { Reconciler, type FleetSource } from '../../src/reconciler/reconciler.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from '../harness/fake-node.js';
import { specOf } from '../harness/reconciler-core.js';
import { recordFault } from '../faults/report.js';

const spec = await specOf((f) => {
  f['fleet.yaml'] = 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1h\nbackoff: { initial: 1s, max: 4s }\n';
  delete f['models/beta.yaml'];
});
const S = spec.settings;

class FixedSpec implements FleetSource {
  applied = { spec, revision: 'rev1', warnings: [], at: new Date(0) };
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
function rng(seed: number): () => number {
  let x = seed || 1;
  return () => ((x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
}

interface Run {
  readonly r: Reconciler;
  readonly log: FakeFleetLog;
  readonly clock: FakeClock;
  readonly tracker: FixedSpec;
  readonly saved: () => ControllerState;
  /** Steps of the world until `done` holds (or maxSteps); up to triggersPerStep − 1 triggers arrive every step. */
  drive(done: () => boolean, maxSteps?: number, triggersPerStep?: number): Promise<void>;
}

function setup(seed: number, opts: { adopt?: (nodes: Map<string, FakeNode>) => void; observeMs?: number; saveMs?: number } = {}): Run {
  const random = rng(seed);
  const clock = new FakeClock();
  const timers = new FakeTimers(clock);
  const log = new FakeFleetLog();
  const tracker = new FixedSpec();
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
    async drive(done, maxSteps = 4000, triggersPerStep = 4) {
      for (let step = 0; step < maxSteps && !done(); step++) {
        const triggers = Math.floor(random() * triggersPerStep);
        for (let i = 0; i < triggers; i++) void r.requestPass('demand');
        await ticks(1 + Math.floor(random() * 6));
        clock.advance(100 + Math.floor(random() * 500));
        timers.fire();
      }
    },
  };
}

const parked = (r: Reconciler): boolean => r.model('alpha')?.parked != null;

/** Every start of `model` from index `from`: one at a time, each at least the backoff after the failure before it. */
function assertStartsHonourBackoff(run: Run, from: number, count: number, what: string): void {
  const starts = run.log.startsOf('alpha').slice(from);
  const failures = run.log.failures.filter((f) => f.model === 'alpha').slice(from);
  assert.equal(starts.length, count, `${what}: ${starts.length} starts, want ${count}`);
  for (let i = 1; i < starts.length; i++) {
    const gap = starts[i]!.mono - failures[i - 1]!.mono;
    assert.ok(gap >= backoffMs(i, S), `${what}: start ${i + 1} came ${gap} ms after failure ${i}, backoff is ${backoffMs(i, S)} ms`);
  }
  assert.equal(run.log.maxInFlight.get('alpha'), 1, `${what}: two starts of alpha were in flight at once`);
}

async function scenario(seed: number): Promise<void> {
  const run = setup(seed);
  const { r } = run;
  try {
    await r.start();
    await run.drive(() => parked(r));
    assert.ok(parked(r), `seed ${seed}: alpha never parked`);
    await run.drive(() => false, 40); // a parked model is left alone, however many triggers come
    assertStartsHonourBackoff(run, 0, S.parkAfterFailures, `seed ${seed}`);
    assert.equal(r.model('alpha')!.consecutiveFailures, S.parkAfterFailures);
    assert.equal(run.saved().models.alpha!.consecutiveFailures, S.parkAfterFailures, 'the record on disk has the count');
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

describe('the reconciler shell with fake nodes and a fake clock', () => {
  it('a failing model: exactly 5 starts, one at a time, backoff honoured, under a stream of triggers; the same after a trailer and after ctl retry (200 interleavings)', async () => {
    for (let seed = 1; seed <= 200; seed++) await scenario(seed);
  });

  it('a second pass over an unchanged world plans zero actions', async () => {
    const run = setup(7);
    try {
      await run.r.start();
      await run.drive(() => parked(run.r));
      await run.r.requestPass('test');
      await run.r.requestPass('test');
      assert.equal(run.r.snapshot().lastPass?.actions, 0);
    } finally {
      await run.r.stop();
    }
  });

  for (const step of [2 * 3600_000, -2 * 3600_000]) {
    it(`a wall-clock step of ${step > 0 ? '+' : '-'}2 h: the backoff after a failure lasts its real time`, async () => {
      const run = setup(11);
      try {
        await run.r.start();
        await run.drive(() => run.log.failures.some((f) => f.model === 'alpha'));
        run.clock.step(step);
        await run.drive(() => run.log.startsOf('alpha').length >= 2, 200);
        const gap = run.log.startsOf('alpha')[1]!.mono - run.log.failures.find((f) => f.model === 'alpha')!.mono;
        assert.ok(gap >= backoffMs(1, S), `the second start came ${gap} ms of real time after the failure (backoff ${backoffMs(1, S)} ms)`);
        assert.ok(gap <= backoffMs(1, S) + 2000, `the second start waited ${gap} ms of real time (backoff ${backoffMs(1, S)} ms)`);
        recordFault({ fault: '10 clock steps', injected: `a wall-clock step of ${step > 0 ? '+' : '-'}2 h after a failed start (injected clock)`, held: `the next start came ${gap} ms of real time after the failure (backoff ${backoffMs(1, S)} ms)` });
      } finally {
        await run.r.stop();
      }
    });
  }

  it('a wall-clock step of +2 h: a replica still loading is not judged unhealthy before its start timeout of real time', async () => {
    const limit = spec.profiles[spec.models.gamma!.profile]!.startTimeoutMs;
    const run = setup(12, {
      adopt: (nodes) => {
        // gamma's replica from before a restart: alive, not answering /health yet
        nodes.get('cpu-01')!.replicas.set('gamma-old', { id: 'gamma-old', model: 'gamma', digest: spec.models.gamma!.digest, port: 20000, pid: 9, startedAt: 0, endpoint: 'http://cpu-01:20000', state: 'starting' });
      },
    });
    try {
      await run.r.start();
      await run.drive(() => false, 5);
      run.clock.step(2 * 3600_000);
      await run.drive(() => false, 5);
      assert.equal(run.r.model('gamma')!.consecutiveFailures, 0, 'judged unhealthy on a clock step');
      assert.deepEqual(run.r.model('gamma')!.replicas.map((r) => `${r.id} ${r.phase}`), ['gamma-old starting']);
      run.clock.advance(limit);
      await run.drive(() => run.r.model('gamma')!.consecutiveFailures > 0, 20);
      assert.equal(run.r.model('gamma')!.lastError?.code, 'REPLICA_UNHEALTHY');
      recordFault({ fault: '10 clock steps', injected: 'a wall-clock step of +2 h while an adopted replica loads (injected clock)', held: 'not judged unhealthy until its start timeout of real time had passed' });
    } finally {
      await run.r.stop();
    }
  });

  it('with no trigger but its own timers, and I/O that takes time after the decision (a due time passes before the pass ends), a failing model still parks after exactly 5', async () => {
    const run = setup(13, { observeMs: 300, saveMs: 1500 });
    try {
      await run.r.start();
      await run.drive(() => parked(run.r), 4000, 1);
      assert.ok(parked(run.r), `alpha not parked: ${JSON.stringify(run.r.model('alpha'))}`);
      assertStartsHonourBackoff(run, 0, S.parkAfterFailures, 'timers only');
    } finally {
      await run.r.stop();
    }
  });
});
