/**
 * The whole reconciler shell driven with recording fake nodes, a fake clock and fake timers: a model
 * whose replicas always die is started exactly park_after_failures times, never two at once, each
 * start at least the backoff after the previous failure — while triggers keep arriving as a busy
 * router sends them — then parked; the same after a `Llmgw-Retry:` trailer and after `ctl retry`.
 * Run 200 times over varied interleavings (how long a start takes to report, how many triggers
 * arrive per step), in two worker threads, each run in a few milliseconds.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { Worker } from 'node:worker_threads';
import pino from 'pino';
import type { RefreshResult } from '../../src/git/tracker.js';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { backoffMs } from '../../src/reconciler/health.js';
import { Reconciler, type FleetSource } from '../../src/reconciler/reconciler.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { stopIds, stopOf } from '../../src/reconciler/stops.js';
import type { StatusSink } from '../../src/reconciler/persist.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from '../harness/fake-node.js';
import { specOf } from '../harness/reconciler-core.js';
import { asV2 } from '../harness/record-v2.js';
import { recordFault } from '../harness/fault-report.js';
import { S, assertStartsHonourBackoff, parked, rng, setup, spec } from '../harness/reconciler-shell-runs.js';
import type { ReplicaView } from '../../src/reconciler/view.js';

describe('the reconciler shell with fake nodes and a fake clock', () => {
  it('a failing model: exactly 5 starts, one at a time, backoff honoured, under a stream of triggers; the same after a trailer and after ctl retry (200 interleavings)', async () => {
    // seeds 1–100 and 101–200 in two worker threads (reconciler-shell-worker.ts), each run as it was
    const half = (from: number, to: number): Promise<string | null> =>
      new Promise((resolve, reject) => {
        const w = new Worker(new URL('../harness/reconciler-shell-worker.js', import.meta.url), { workerData: { from, to } });
        w.once('message', resolve);
        w.once('error', reject);
        w.once('exit', (code) => reject(new Error(`the scenario worker exited (${code}) before reporting`)));
      });
    assert.deepEqual((await Promise.all([half(1, 100), half(101, 200)])).filter((f) => f !== null), []);
  });

  it('a demand whose fresh placement is a start: started by the pass it asks for, on the last look, with no sync or look first (#38)', async () => {
    const onDemand = await specOf((f) => {
      f['fleet.yaml'] = 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1h\nbackoff: { initial: 1s, max: 4s }\n';
      delete f['models/alpha.yaml'];
      delete f['access/keys.yaml'];
    });
    const run = setup(3, { spec: onDemand });
    try {
      await run.r.start();
      await run.drive(() => run.r.model('gamma')?.phase === 'ready', 200, 1);
      const looks = (): number => [...run.nodes.values()].reduce((n, x) => n + x.observes, 0);
      const before = looks();
      assert.deepEqual(await run.r.demand('beta'), { kind: 'starting' });
      assert.equal(looks(), before, 'no node was looked at before the start');
      assert.deepEqual(Object.values(run.r.record().replicas).filter((x) => x.model === 'beta').map((x) => x.phase.kind), ['launching']);
      await run.drive(() => run.r.model('beta')?.phase === 'ready', 200, 1);
      assert.equal(run.log.startsOf('beta').length, 1);
      assert.ok(looks() > before, 'the pass the start\'s outcome asked for looked again');
      // a second demand while it is ready: nothing to start, no pass
      assert.equal((await run.r.demand('beta')).kind, 'ready');
      await run.r.requestPass('test');
      await run.r.requestPass('test');
      assert.equal(run.r.snapshot().lastPass?.actions, 0, 'an unchanged world plans nothing after it');
    } finally {
      await run.r.stop();
    }
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

// ------------------------------------------------------------------ the stop sequence in the shell

const rollSpec = await specOf((f) => {
  f['fleet.yaml'] = 'placement_reserve: 1GiB\npoll_interval: 1h\ndrain_grace: 30s\nstop_grace: 10s\n';
  f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2');
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});
const scaledDown = await specOf((f) => {
  f['fleet.yaml'] = 'placement_reserve: 1GiB\npoll_interval: 1h\ndrain_grace: 30s\nstop_grace: 10s\n';
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});
const rolled = await specOf((f) => {
  f['fleet.yaml'] = 'placement_reserve: 1GiB\npoll_interval: 1h\ndrain_grace: 30s\nstop_grace: 10s\n';
  f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2').replace('alpha-q4.gguf', 'alpha-q5.gguf');
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});

class SwappableSpec implements FleetSource {
  applied: { spec: typeof rollSpec; revision: string; warnings: never[]; at: Date } = { spec: rollSpec, revision: 'rev1', warnings: [], at: new Date(0) };
  rejected = null;
  lastSyncOk = null;
  lastSyncError = null;
  async refresh(): Promise<RefreshResult> {
    await ticks(1);
    return { outcome: 'unchanged', head: this.applied.revision, retries: [], error: null };
  }
}

/**
 * A world of fake nodes whose replicas report in-flight requests that end at random. slowLooks: a
 * look reads a node's replicas some ticks before its answer arrives and a launch takes ticks (as over
 * ssh), so a start can launch its replica and conclude ready while a look from before it runs. status:
 * where each pass's status goes (none by default).
 */
/**
 * Both replicas of alpha ready, the first restarted with 2 requests in flight, time stepped until its
 * replacement is ready and the first is draining (its stop in the record).
 */
async function restartUntilDraining(w: ReturnType<typeof rollSetup>): Promise<{ first: ReplicaView | undefined; ids: readonly string[] }> {
  await w.drive(() => w.r.readyReplicas('alpha').length === 2);
  const [first] = w.r.readyReplicas('alpha');
  w.busy.set(first!.id, 2);
  const ids = await w.r.restart({ replicas: [first!.id] });
  for (let i = 0; i < 400 && !stopOf(w.r.record(), first!.id); i++) {
    w.busy.set(first!.id, 2);
    await ticks(3);
    w.clock.advance(200);
    w.timers.fire();
  }
  return { first, ids };
}

function rollSetup(seed: number, initial: ControllerState = emptyState, shared?: { nodes: Map<string, FakeNode>; clock: FakeClock; timers: FakeTimers; busy: Map<string, number>; log: FakeFleetLog }, opts: { slowLooks?: boolean; status?: StatusSink | null } = {}) {
  const random = rng(seed);
  const clock = shared?.clock ?? new FakeClock();
  const timers = shared?.timers ?? new FakeTimers(clock);
  const log = shared?.log ?? new FakeFleetLog();
  const nodes = shared?.nodes ?? new Map(Object.keys(rollSpec.nodes).map((n) => [n, new FakeNode(n, clock, log, new Set(), 1 + Math.floor(random() * 4), 0, opts.slowLooks ? { lookTicks: 1 + Math.floor(random() * 8), launchTicks: Math.floor(random() * 3) } : undefined)]));
  const busy = shared?.busy ?? new Map<string, number>();
  const tracker = new SwappableSpec();
  let saved = initial;
  let n = 0;
  const r = new Reconciler({
    tracker,
    driverFor: (node) => nodes.get(node.name)!,
    stateStore: { path: 'memory', save: async (s) => ((saved = s), true) },
    status: opts.status ?? null,
    initialState: initial,
    engineApiKey: 'k',
    logger: pino({ level: 'silent' }),
    clock: clock.now,
    monotonic: clock.monotonic,
    timers,
    newReplicaId: (model) => `${model}-${seed}-${++n}`,
    inFlight: async (endpoint) => {
      await ticks(1);
      const id = endpoint.split('/').pop()!;
      return busy.get(id) ?? 0;
    },
  });
  const alive = (model: string): string[] => [...nodes.values()].flatMap((x) => [...x.replicas.values()].filter((rep) => rep.model === model).map((rep) => rep.id));
  const cuts: string[] = [];
  /** Every stopReplica so far of a replica with requests in flight, before its drain grace ended. */
  const checkCuts = (): void => {
    for (const x of nodes.values()) {
      for (const s of x.stopped.splice(0)) {
        const since = stopOf(saved, s.id)?.since ?? stopOf(r.record(), s.id)?.since;
        if ((busy.get(s.id) ?? 0) > 0 && (since === undefined || s.at - since < rollSpec.settings.drainGraceMs)) cuts.push(`${s.id} with ${busy.get(s.id)} in flight`);
      }
    }
  };
  return {
    r, clock, timers, nodes, busy, log, tracker, cuts, alive, saved: () => saved,
    /** One step: some triggers, requests end at random, time passes, timers fire; the invariants hold. */
    async drive(done: () => boolean, maxSteps = 2000, invariant: () => void = () => undefined): Promise<void> {
      for (let step = 0; step < maxSteps && !done(); step++) {
        if (random() < 0.3) void r.requestPass('demand');
        for (const [id, k] of busy) if (k > 0 && random() < 0.2) busy.set(id, k - 1);
        // the router sends new requests only to replicas it is offered (ready in the snapshot)
        for (const rep of r.readyReplicas('alpha')) if (random() < 0.15) busy.set(rep.id, (busy.get(rep.id) ?? 0) + 1);
        await ticks(1 + Math.floor(random() * 6));
        clock.advance(50 + Math.floor(random() * 400));
        timers.fire();
        checkCuts();
        invariant();
      }
    },
  };
}

/** A rolling replacement of 2 replicas under load (a definition change, or ctl restart), to the end: the most alpha processes seen at once. */
async function rollingChange(seed: number, opts: { slowLooks?: boolean; by?: 'definition' | 'restart' } = {}): Promise<number> {
  const w = rollSetup(seed, emptyState, undefined, opts);
  try {
    await w.r.start();
    await w.drive(() => w.r.readyReplicas('alpha').length === 2);
    let restarted: readonly string[] = [];
    if (opts.by === 'restart') restarted = await w.r.restart({ model: 'alpha' });
    else {
      w.tracker.applied = { spec: rolled, revision: 'rev2', warnings: [], at: new Date(0) };
      void w.r.requestPass('webhook');
    }
    const digest = opts.by === 'restart' ? rollSpec.models.alpha!.digest : rolled.models.alpha!.digest;
    let maxProcs = 0;
    const done = (): boolean => {
      const m = w.r.model('alpha');
      return m !== null && w.r.restartDone(restarted) && m.replicas.length === 2 && m.replicas.every((x) => x.phase === 'ready' && x.digest === digest) && w.alive('alpha').length === 2 && stopIds(w.r.record()).length === 0;
    };
    await w.drive(done, 4000, () => {
      maxProcs = Math.max(maxProcs, w.alive('alpha').length);
      const stops = asV2(w.r.record()).stops;
      for (const rep of w.r.readyReplicas('alpha')) assert.ok(!stops[rep.id], `seed ${seed}: ${rep.id} is being stopped and still offered to routers`);
    });
    // done includes an empty stop record: a stop whose replica the node no longer has ends its record too
    assert.ok(done(), `seed ${seed}: the rollout did not finish: ${JSON.stringify(w.r.model('alpha')?.replicas.map((x) => [x.id, x.phase]))}, stops ${JSON.stringify(asV2(w.r.record()).stops)}`);
    assert.deepEqual(w.cuts, [], `seed ${seed}: requests cut`);
    assert.deepEqual(asV2(w.r.record()).stops, {}, `seed ${seed}: stops left in the record`);
    return maxProcs;
  } finally {
    await w.r.stop();
  }
}

describe('the stop sequence in the shell (fake nodes, fake clock)', () => {
  it('a rolling definition change under load: no stop cuts a request, never more than replicas + 1 processes, a draining replica is never offered (100 interleavings)', async () => {
    for (let seed = 1; seed <= 100; seed++) {
      const maxProcs = await rollingChange(seed);
      assert.ok(maxProcs <= 3, `seed ${seed}: ${maxProcs} alpha processes at once`);
    }
  });

  for (const by of ['definition', 'restart'] as const) {
    it(`${by === 'definition' ? 'the same' : 'a restart of the model'} with looks and launches that take time (#23: a replacement ready while a look from before it was on its node ran): one replacement at a time, never more than replicas + 1 processes (100 interleavings)`, async () => {
      for (let seed = 1; seed <= 100; seed++) {
        const maxProcs = await rollingChange(seed, { slowLooks: true, by });
        assert.ok(maxProcs <= 3, `seed ${seed}, ${by}, looks that take time: ${maxProcs} alpha processes at once`);
      }
    });
  }

  it('a stop that takes long (stop_grace) holds up neither a pass nor the publication of the replacement it started', async () => {
    const w = rollSetup(3);
    try {
      await w.r.start();
      await w.drive(() => w.r.readyReplicas('alpha').length === 2);
      const originals = w.r.readyReplicas('alpha').map((x) => x.id);
      let release!: () => void;
      for (const x of w.nodes.values()) x.stopGate = new Promise((res) => (release = res));
      await w.r.restart({ model: 'alpha' });
      // first replacement ready → an old one drains (nothing in flight) and hangs in its SIGTERM
      await w.drive(() => [...w.nodes.values()].some((x) => x.stopped.length > 0) || w.r.model('alpha')!.replicas.some((x) => x.phase === 'stopping'), 2000);
      const stopping = w.r.model('alpha')!.replicas.filter((x) => x.phase === 'stopping');
      assert.equal(stopping.length, 1, JSON.stringify(w.r.model('alpha')!.replicas.map((x) => [x.id, x.phase])));
      const before = w.r.snapshot().lastPass!.startedAt;
      await w.r.requestPass('test');
      assert.ok(w.r.snapshot().lastPass!.startedAt > before, 'a pass ran and published while the stop hangs');
      assert.ok(w.r.readyReplicas('alpha').some((x) => !originals.includes(x.id)), 'the new replica is offered while the old one stops');
      assert.equal(w.r.readyReplicas('alpha').length, 2, 'the new one and the other old one serve');
      release();
      for (const x of w.nodes.values()) x.stopGate = null;
      await w.drive(() => w.r.restartDone(stopping.map((x) => x.id)) && w.r.readyReplicas('alpha').length === 2, 2000);
      assert.equal(w.r.readyReplicas('alpha').length, 2);
    } finally {
      await w.r.stop();
    }
  });

  it('the log of a replica being stopped: read while it is on its node; once its stop removed it, REPLICA_NOT_FOUND says it was being stopped; once the stop ends the snapshot drops it at once (not at the end of a pass)', async () => {
    const w = rollSetup(3);
    const stops: (() => void)[] = [];
    const looks: (() => void)[] = [];
    try {
      await w.r.start();
      await w.drive(() => w.r.readyReplicas('alpha').length === 2);
      for (const x of w.nodes.values()) x.stopGate = new Promise((res) => stops.push(res));
      await w.r.restart({ model: 'alpha' });
      await w.drive(() => w.r.model('alpha')!.replicas.some((x) => x.phase === 'stopping'), 2000);
      const old = w.r.model('alpha')!.replicas.find((x) => x.phase === 'stopping')!;
      assert.equal(await w.r.logs(old.id, 10), `log of ${old.id}\n`, 'still on its node: its log is there');
      // the stop's last step removes its directory; the snapshot lists it until the next pass
      for (const x of w.nodes.values()) x.replicas.delete(old.id);
      await assert.rejects(w.r.logs(old.id, 10), (e: unknown) => {
        assert.ok(e instanceof LlmgwError, String(e));
        assert.equal(e.code, 'REPLICA_NOT_FOUND');
        assert.equal(e.message, `replica ${old.id} of alpha was being stopped and is gone from node ${old.node}: a stopped replica's log goes with it`);
        return true;
      });
      await assert.rejects(w.r.logs('alpha-404', 10), (e: unknown) => e instanceof LlmgwError && e.code === 'REPLICA_NOT_FOUND' && e.message === 'no replica "alpha-404"');
      // the stop ends while a pass hangs in its look at the nodes: the snapshot drops the replica at once
      const gate = new Promise<void>((res) => looks.push(res));
      for (const x of w.nodes.values()) x.observeGate = gate;
      const passBefore = w.r.snapshot().lastPass!.startedAt;
      void w.r.requestPass('test');
      for (const open of stops) open();
      for (const x of w.nodes.values()) x.stopGate = null;
      for (let i = 0; i < 100 && stopOf(w.r.record(), old.id); i++) await ticks(1);
      assert.equal(stopOf(w.r.record(), old.id), undefined, 'the stop finished');
      await ticks(1); // the snapshot is published at the next turn of the loop
      assert.equal(w.r.snapshot().lastPass!.startedAt, passBefore, 'no pass ended meanwhile');
      assert.deepEqual(w.r.model('alpha')!.replicas.filter((x) => x.id === old.id), [], 'the snapshot no longer lists it');
      await assert.rejects(w.r.logs(old.id, 10), (e: unknown) => e instanceof LlmgwError && e.code === 'REPLICA_NOT_FOUND' && e.message === `no replica "${old.id}"`);
    } finally {
      for (const open of [...stops, ...looks]) open();
      for (const x of w.nodes.values()) [x.stopGate, x.observeGate] = [null, null];
      await w.r.stop();
    }
  });

  it('a stop that ends while a pass writes the status branch: the pass then publishes a snapshot without it, never the older one it wrote', async () => {
    let hold: Promise<void> | null = null;
    let writes = 0;
    const written: string[][] = [];
    const status: StatusSink = {
      lastOk: null,
      async write(snap) {
        writes++;
        written.push(snap.models.flatMap((m) => m.replicas.map((x) => `${x.id}:${x.phase}`)));
        if (hold) await hold;
        return null;
      },
    };
    const w = rollSetup(4, emptyState, undefined, { status });
    const gates: (() => void)[] = [];
    try {
      await w.r.start();
      await w.drive(() => w.r.readyReplicas('alpha').length === 2);
      for (const x of w.nodes.values()) x.stopGate = new Promise((res) => gates.push(res));
      await w.r.restart({ model: 'alpha' });
      await w.drive(() => w.r.model('alpha')!.replicas.some((x) => x.phase === 'stopping'), 2000);
      const old = w.r.model('alpha')!.replicas.find((x) => x.phase === 'stopping')!;
      // a pass builds its snapshot (the old replica stopping) and hangs writing it to the branch
      hold = new Promise((res) => gates.push(res));
      const before = writes;
      const pass = w.r.requestPass('test');
      for (let i = 0; i < 200 && writes === before; i++) await ticks(1);
      assert.ok(writes > before, 'the pass writes the status branch');
      assert.ok(written.at(-1)!.includes(`${old.id}:stopping`), JSON.stringify(written.at(-1)));
      // meanwhile the stop ends
      for (const x of w.nodes.values()) x.stopGate = null;
      for (const open of gates.splice(0, w.nodes.size)) open();
      for (let i = 0; i < 200 && stopOf(w.r.record(), old.id); i++) await ticks(1);
      assert.equal(stopOf(w.r.record(), old.id), undefined, 'the stop ended');
      hold = null;
      for (const open of gates.splice(0)) open();
      await pass;
      assert.deepEqual(w.r.model('alpha')!.replicas.filter((x) => x.id === old.id), [], `the snapshot after the pass: ${JSON.stringify(w.r.model('alpha')!.replicas.map((x) => [x.id, x.phase]))}`);
    } finally {
      hold = null;
      for (const open of gates) open();
      for (const x of w.nodes.values()) x.stopGate = null;
      await w.r.stop();
    }
  });

  it('a replica is shown draining only once its stop is in the saved record (a failover right after continues the same drain)', async () => {
    const w = rollSetup(6);
    const early: string[] = [];
    const off = w.r.onSnapshot((snap) => {
      for (const rep of snap.models.flatMap((m) => m.replicas)) if ((rep.phase === 'draining' || rep.phase === 'stopping') && !stopOf(w.saved(), rep.id)) early.push(rep.id);
    });
    try {
      await w.r.start();
      await w.drive(() => w.r.readyReplicas('alpha').length === 2);
      const ids = await w.r.restart({ model: 'alpha' });
      await w.drive(() => w.r.restartDone(ids) && w.r.readyReplicas('alpha').length === 2, 4000);
      assert.ok(w.r.restartDone(ids), 'the restart finished');
      assert.deepEqual(early, [], 'shown leaving routing before the record held its stop');
    } finally {
      off();
      await w.r.stop();
    }
  });

  it('a wall-clock step during a pass that records a stop: its drain starts at the stepped time, once (not moved again by the next pass), and ends', async () => {
    const w = rollSetup(8);
    try {
      await w.r.start();
      await w.drive(() => w.r.readyReplicas('alpha').length === 2);
      // a 2 → 1 scale-down; the pass's look is held while the wall clock steps 2 h ahead
      let open = (): void => undefined;
      const gate = new Promise<void>((resolve) => (open = resolve));
      for (const n of w.nodes.values()) n.observeGate = gate;
      w.tracker.applied = { spec: scaledDown, revision: 'rev2', warnings: [], at: new Date(0) };
      const pass = w.r.requestPass('webhook');
      await ticks(3);
      w.clock.step(2 * 3600_000);
      for (const n of w.nodes.values()) n.observeGate = null;
      open();
      await pass;
      const [id, rec] = Object.entries(asV2(w.r.record()).stops)[0] ?? [];
      assert.ok(id && rec, 'the surplus replica is being stopped');
      assert.ok(Math.abs(rec.since - w.clock.t) < 60_000, `its drain started at the stepped time (${rec.since - w.clock.t} ms off)`);
      await w.r.requestPass('test');
      assert.equal(stopOf(w.r.record(), id)?.since, rec.since, 'the next pass does not move it again');
      await w.drive(() => !w.alive('alpha').includes(id), 400);
      assert.ok(!w.alive('alpha').includes(id), 'the drain ended and the replica was stopped');
    } finally {
      await w.r.stop();
    }
  });

  it('a wall-clock step first seen by an operator call between passes is applied, not lost: a drain in progress keeps its real time', async () => {
    const w = rollSetup(5);
    try {
      await w.r.start();
      const { first } = await restartUntilDraining(w);
      const before = stopOf(w.r.record(), first!.id);
      assert.ok(before, 'draining');
      // the wall clock steps 2 h ahead; the first to take a time is an operator call, not a pass
      w.clock.step(2 * 3600_000);
      const [other] = w.r.readyReplicas('alpha').filter((x) => x.id !== first!.id);
      await w.r.restart({ replicas: [other!.id] });
      const after = stopOf(w.r.record(), first!.id);
      assert.ok(after, 'still draining (its grace is real time, not 2 h of a stepped clock)');
      assert.ok(Math.abs(after.since - (before.since + 2 * 3600_000)) < 60_000, `its start moved with the step (${after.since - before.since} ms)`);
      assert.deepEqual(w.cuts, []);
    } finally {
      await w.r.stop();
    }
  });

  it('a controller restart in the middle of a drain continues it from the record: never restarts or forgets it, never cuts', async () => {
    const w = rollSetup(5);
    await w.r.start();
    const { first, ids } = await restartUntilDraining(w);
    const rec = stopOf(w.r.record(), first!.id);
    assert.ok(rec, 'draining');
    await w.r.stop();
    assert.deepEqual(stopOf(w.saved(), first!.id), rec, 'the drain is in the record on disk');
    const w2 = rollSetup(5, w.saved(), { nodes: w.nodes, clock: w.clock, timers: w.timers, busy: w.busy, log: w.log });
    try {
      await w2.r.start();
      assert.equal(w2.r.model('alpha')!.replicas.find((x) => x.id === first!.id)?.phase, 'draining', 'the new controller shows it draining, not routable');
      assert.equal(stopOf(w2.r.record(), first!.id)!.since, rec.since, 'the same drain (its start kept)');
      await w2.drive(() => !w2.alive('alpha').includes(first!.id), 2000);
      assert.ok(!w2.alive('alpha').includes(first!.id));
      assert.deepEqual(w2.cuts, []);
      assert.ok(w2.r.restartDone(ids));
    } finally {
      await w2.r.stop();
    }
  });
});
