/**
 * One pass's decision (pure), over the interleavings that used to start a failing model twice at
 * once: a start whose replica died on the node before its outcome was applied, several triggers
 * during one start, an outcome applied between observation and decision.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { initialHealth, startFailed } from '../../src/reconciler/health.js';
import { startConcluded } from '../../src/reconciler/outcomes.js';
import { decide, freshPlacement, pruned, type DecideInput } from '../../src/reconciler/pass.js';
import type { ObservedNode } from '../../src/reconciler/planner.js';
import { clockStepped, startLaunched, type ControllerState } from '../../src/reconciler/state.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { asV2 } from '../harness/record-v2.js';
import { alphaOnlySpec, KEV_FAILURE, memoryOf, node, observed, specOf, stateFor } from '../harness/reconciler-core.js';

const spec = await alphaOnlySpec(); // one always-on model whose starts fail
const S = spec.settings;
const alpha = spec.models.alpha!;
const kev = KEV_FAILURE;
const died = { code: 'REPLICA_UNKNOWN_ARCHITECTURE' as const, message: kev.message, logTail: '' };

/** alpha after one failure at t=0, its backoff over by `now`. */
const failedOnce = (): ControllerState => stateFor(spec, { models: { alpha: startFailed(initialHealth(alpha.digest), kev, 0, S) } });
const NOW = S.backoff.initialMs * 10;

function run(state: ControllerState, nodes: readonly ObservedNode[], over: Partial<DecideInput> = {}): ReturnType<typeof decide> {
  let n = 0;
  return decide({ state, spec, nodes, memory: memoryOf(spec), memoryErrors: {}, running: new Set(Object.keys(asV2(state).starts)), stopping: new Set(), now: NOW, newReplicaId: (m) => `${m}-new${++n}`, ...over });
}

const starts = (d: ReturnType<typeof decide>): string[] => d.actions.filter((a) => a.kind === 'start').map((a) => `${a.model}@${a.node}`);
const stops = (d: ReturnType<typeof decide>): string[] => d.actions.filter((a) => a.kind === 'stop').map((a) => `${a.replicaId} (${a.kind === 'stop' ? a.reason : ''})`);

describe('a pass decides (interleavings of a failing start)', () => {
  const inFlight = startLaunched(failedOnce(), 'a1', { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: NOW - 10 });

  const table: { name: string; state: ControllerState; nodes: ObservedNode[]; running?: string[]; starts: string[]; stops: string[]; failures: number }[] = [
    {
      name: 'a start whose replica already died on the node, outcome not applied yet: still in flight — no second start, no reap, nothing counted',
      state: inFlight,
      nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'failed', { failure: died })]), node('cpu-02')],
      starts: [],
      stops: [],
      failures: 1,
    },
    { name: 'a start not yet visible on the node: in flight, nothing planned', state: inFlight, nodes: [node('cpu-01'), node('cpu-02')], starts: [], stops: [], failures: 1 },
    { name: 'a start visible as starting: in flight, nothing planned', state: inFlight, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'starting')]), node('cpu-02')], starts: [], stops: [], failures: 1 },
    {
      name: 'the outcome was applied after the node was observed (replica still shown starting): backoff holds, no start',
      state: startConcluded(inFlight, 'a1', { kind: 'failed', error: kev }, NOW - 1, S).state,
      nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'starting')]), node('cpu-02')],
      running: [],
      starts: [],
      stops: [],
      failures: 2,
    },
    {
      name: 'the outcome applied, the node shows the dead replica: reaped, not counted again, backoff holds',
      state: startConcluded(inFlight, 'a1', { kind: 'failed', error: kev }, NOW - 1, S).state,
      nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'failed', { failure: died })]), node('cpu-02')],
      running: [],
      starts: [],
      stops: ['a1 (failed)'],
      failures: 2,
    },
    {
      name: 'the backoff over and nothing in flight: one start',
      state: failedOnce(),
      nodes: [node('cpu-01'), node('cpu-02')],
      starts: ['alpha@cpu-01'],
      stops: [],
      failures: 1,
    },
    {
      name: 'a replica that crashed after ready (no start of ours): counted once and reaped',
      state: stateFor(spec),
      nodes: [node('cpu-01', [observed(spec, 'c1', 'alpha', 'failed', { failure: { code: 'REPLICA_EXITED', message: 'process gone', logTail: '' } })]), node('cpu-02')],
      starts: [],
      stops: ['c1 (failed)'],
      failures: 1,
    },
    {
      name: 'a start inherited from before a restart whose replica died meanwhile: counted, reaped',
      state: startLaunched(stateFor(spec), 'old1', { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: 1 }),
      nodes: [node('cpu-01', [observed(spec, 'old1', 'alpha', 'failed', { failure: died })]), node('cpu-02')],
      running: [],
      starts: [],
      stops: ['old1 (failed)'],
      failures: 1,
    },
  ];
  for (const c of table) {
    it(c.name, () => {
      const d = run(c.state, c.nodes, c.running ? { running: new Set(c.running) } : {});
      assert.deepEqual(starts(d), c.starts);
      assert.deepEqual(stops(d), c.stops);
      assert.equal(d.state.models.alpha!.health.consecutiveFailures, c.failures);
    });
  }

  it('two triggers during one start plan nothing twice: the second pass over an unchanged world plans zero actions', () => {
    const first = run(failedOnce(), [node('cpu-01'), node('cpu-02')]);
    assert.deepEqual(starts(first), ['alpha@cpu-01']);
    // the shell records the start it launches; then two more passes come before it reports
    const a = first.actions[0]!;
    const launched = startLaunched(first.state, a.replicaId, { model: a.model, node: a.node, digest: alpha.digest, startedAt: NOW });
    const second = run(launched, [node('cpu-01', [observed(spec, a.replicaId, 'alpha', 'failed', { failure: died })]), node('cpu-02')]);
    const third = run(second.state, [node('cpu-01', [observed(spec, a.replicaId, 'alpha', 'failed', { failure: died })]), node('cpu-02')]);
    assert.deepEqual([second.actions, third.actions], [[], []]);
    assert.equal(third.state.models.alpha!.health.consecutiveFailures, 1);
  });

  it('an observed failure is counted in the record, so the next pass does not count it again', () => {
    const crashed = [node('cpu-01', [observed(spec, 'c1', 'alpha', 'failed', { failure: { code: 'REPLICA_EXITED', message: 'gone', logTail: '' } })]), node('cpu-02')];
    const once = run(stateFor(spec), crashed);
    const twice = run(once.state, crashed);
    assert.equal(twice.state.models.alpha!.health.consecutiveFailures, 1);
  });

  it('bookkeeping of replicas no node shows any more is pruned; a start still running keeps its', () => {
    const s: ControllerState = stateFor(spec, { restarts: { gone: 1, kept: 2, running: 3 }, draining: { gone: 1 }, accounted: { gone: 1, kept: 2 }, starts: { running: { model: 'alpha', node: 'cpu-01', digest: 'd', startedAt: 0 } } });
    const p = asV2(pruned(s, [node('cpu-01', [observed(spec, 'kept', 'alpha', 'ready')]), node('cpu-02', [], false)]));
    assert.deepEqual(p.restarts, { kept: 2, running: 3 });
    assert.deepEqual(p.draining, {});
    assert.deepEqual(p.accounted, { kept: 2 });
  });

  it("a node that failed the start itself (a full disk): not counted, and the next start goes to another node until the setback ends", () => {
    const full = { code: 'NODE_DISK_FULL', message: "no space left on the node's data dir (12 KiB free)" };
    const launched = startLaunched(stateFor(spec), 'a1', { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: 0 });
    const failed = startConcluded(launched, 'a1', { kind: 'failed', error: full }, 0, S).state;
    assert.equal(failed.models.alpha!.health.consecutiveFailures, 0);
    assert.equal(asV2(failed).avoid['alpha@cpu-01'], S.backoff.maxMs);
    const next = run(failed, [node('cpu-01'), node('cpu-02')], { now: S.backoff.initialMs, running: new Set() });
    assert.deepEqual(starts(next), ['alpha@cpu-02']);
    // with the other node gone too, it is unplaceable and says why
    const alone = run(failed, [node('cpu-01'), node('cpu-02', [], false)], { now: S.backoff.initialMs, running: new Set() });
    assert.deepEqual(starts(alone), []);
    assert.match(alone.unplaceable.alpha!.reason, /1 set aside for now/);
    assert.equal(alone.unplaceable.alpha!.avoided, 1);
    // after the setback, cpu-01 is a candidate again, and the entry leaves the record
    const later = run(failed, [node('cpu-01'), node('cpu-02', [], false)], { now: S.backoff.maxMs + 1, running: new Set() });
    assert.deepEqual(starts(later), ['alpha@cpu-01']);
    assert.deepEqual(asV2(later.state).avoid, {});
  });

  it('a fresh placement for a request: the reason when it fits nowhere, a start or a pass when something should start, nothing otherwise', () => {
    const base = { spec, memory: memoryOf(spec), memoryErrors: {}, stopping: new Set<string>(), now: NOW };
    const free = [node('cpu-01'), node('cpu-02')];
    assert.equal(freshPlacement({ ...base, state: stateFor(spec), nodes: free }, 'alpha'), 'start', 'starts are all a pass would do: started on this look (#38)');
    // a pass would also stop the replica of a model gone from the spec: a whole pass, not a start on this look
    const gone = { ...observed(spec, 'g-1', 'alpha', 'ready'), model: 'gone', digest: 'd0' };
    assert.equal(freshPlacement({ ...base, state: stateFor(spec), nodes: [node('cpu-01', [gone]), node('cpu-02')] }, 'alpha'), 'pass');
    assert.equal(freshPlacement({ ...base, state: inFlight, nodes: free }, 'alpha'), null, 'already starting');
    assert.equal(freshPlacement({ ...base, state: stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), parked: { since: 0, lastError: kev } } } }), nodes: free }, 'alpha'), null);
    assert.equal(freshPlacement({ ...base, memory: {}, state: stateFor(spec), nodes: free }, 'alpha'), 'pass', 'memory need not estimated yet: the pass estimates it');
    const full = [{ ...node('cpu-01'), memoryTotalBytes: 2 * 2 ** 30 }, node('cpu-02', [], false)];
    const u = freshPlacement({ ...base, spec: { ...spec, nodes: { 'cpu-01': { ...spec.nodes['cpu-01']!, capacity: { memoryBytes: null, cpus: null } }, 'cpu-02': spec.nodes['cpu-02']! } }, state: stateFor(spec), nodes: full }, 'alpha');
    assert.ok(u && u !== 'pass' && u !== 'start', `want unplaceable, got ${JSON.stringify(u)}`);
    assert.equal(u.code, 'PLACEMENT_NO_ROOM');
    // a replica ready since the last look (its start still in the record) may be evictable once seen: look again, do not refuse
    const readySince = stateFor(spec, { starts: { 'beta-r': { model: 'beta', node: 'cpu-01', digest: 'd', startedAt: 0, readyAt: NOW - 1 } } });
    assert.equal(freshPlacement({ ...base, spec: { ...spec, nodes: { 'cpu-01': { ...spec.nodes['cpu-01']!, capacity: { memoryBytes: null, cpus: null } }, 'cpu-02': spec.nodes['cpu-02']! } }, state: readySince, nodes: full }, 'alpha'), 'pass');
    const unknown = freshPlacement({ ...base, memory: { alpha: null }, memoryErrors: { alpha: 'memory need unknown: could not read the GGUF header (timed out)' }, state: stateFor(spec), nodes: free }, 'alpha');
    assert.deepEqual(unknown && unknown !== 'pass' && unknown !== 'start' ? [unknown.code, unknown.reason] : unknown, ['PLACEMENT_MEMORY_UNKNOWN', 'memory need unknown: could not read the GGUF header (timed out)']);
  });

  it('a replica started with another engine key (the key was lost and made anew) is replaced surge-first, and the log says why', () => {
    const old = observed(spec, 'a-old', 'alpha', 'ready', { keyFingerprint: 'old-key-fp' });
    const first = run(stateFor(spec), [node('cpu-01', [old]), node('cpu-02')], { keyFingerprint: 'new-key-fp' });
    assert.equal(starts(first).length, 1, 'a new replica beside the old one');
    assert.deepEqual(stops(first), [], 'the old one stays until the new one is ready');
    const fresh = observed(spec, 'a-new', 'alpha', 'ready', { keyFingerprint: 'new-key-fp' });
    const second = run(first.state, [node('cpu-01', [old, fresh]), node('cpu-02')], { keyFingerprint: 'new-key-fp' });
    assert.deepEqual(stops(second), ['a-old (replaced)']);
    assert.ok(second.notes.some((n) => n.msg.startsWith('replica started with another engine key') && n.fields.replica === 'a-old'));
    // a replica that recorded no fingerprint (started before llmgw recorded one) is left alone
    const legacy = observed(spec, 'a-legacy', 'alpha', 'ready');
    assert.deepEqual(run(stateFor(spec), [node('cpu-01', [legacy]), node('cpu-02')], { keyFingerprint: 'new-key-fp' }).actions, []);
  });
});

describe('requests in the router and busy replicas are activity (an on-demand model is not stopped as idle while a request waits for it or as its last stream ends)', async () => {
  const full = await specOf();
  const beta = full.models.beta!;
  const idleMs = beta.scaling.mode === 'on_demand' ? beta.scaling.idleTimeoutMs : 0;
  const T = 10_000_000;
  const world = [node('cpu-01', [observed(full, 'beta-1', 'beta', 'ready')]), node('cpu-02')];
  const pass = (state: ControllerState, now: number, busy: string[], active: string[] = []): ReturnType<typeof decide> =>
    decide({ state, spec: full, nodes: world, memory: memoryOf(full), memoryErrors: {}, running: new Set(), stopping: new Set(), busy: new Set(busy), active: new Set(active), now, newReplicaId: (m) => `${m}-new` });
  const idleStops = (d: ReturnType<typeof decide>): string[] => d.actions.filter((a) => a.kind === 'stop' && a.reason === 'idle').map((a) => a.replicaId);

  // the router touched beta when the stream began (T); the stream runs past idle_timeout; passes see it busy
  const table: { name: string; busyAt: number[]; lastPassAt: number; stopped: boolean }[] = [
    { name: 'seen busy until just before the stream ended, a pass right after: kept (idle counts from the last busy look)', busyAt: [T + idleMs + 1000, T + 2 * idleMs], lastPassAt: T + 2 * idleMs + 50, stopped: false },
    { name: 'seen busy last, a pass idle_timeout later: stopped as idle', busyAt: [T + idleMs + 1000], lastPassAt: T + 2 * idleMs + 1001, stopped: true },
    { name: 'never seen busy after the request began (short request): idle_timeout from the request', busyAt: [], lastPassAt: T + idleMs + 1, stopped: true },
    { name: 'busy at the pass itself: never stopped', busyAt: [], lastPassAt: T + 3 * idleMs, stopped: false },
  ];
  for (const c of table) {
    it(c.name, () => {
      let state: ControllerState = stateFor(full, { demand: { beta: T } });
      for (const t of c.busyAt) {
        const d = pass(state, t, ['beta-1']);
        assert.deepEqual(idleStops(d), [], 'a busy replica is never stopped as idle');
        assert.equal(d.state.models.beta!.demand, t, 'a busy look is activity');
        state = d.state;
      }
      const last = pass(state, c.lastPassAt, c.name.startsWith('busy at the pass') ? ['beta-1'] : []);
      assert.deepEqual(idleStops(last), c.stopped ? ['beta-1'] : []);
    });
  }

  it('a request waiting for the replica (activation longer than idle_timeout) keeps it: the pass that sees it ready does not stop it as idle', () => {
    const state: ControllerState = stateFor(full, { demand: { beta: T } });
    const waiting = pass(state, T + idleMs + 500, [], ['beta']);
    assert.deepEqual(idleStops(waiting), []);
    assert.equal(waiting.state.models.beta!.demand, T + idleMs + 500);
    assert.deepEqual(idleStops(pass(state, T + idleMs + 500, [], [])), ['beta-1'], 'without the request held, it would be');
  });

  it('an always-on model is not given demand by its activity', () => {
    const alphaSpec = full.models.alpha!;
    assert.equal(alphaSpec.scaling.mode, 'replicas');
    assert.equal(pass(stateFor(full), T, [], ['alpha']).state.models.alpha!.demand, undefined);
  });

  it('a pass that sees nothing busy leaves the record as it was (an unchanged world writes nothing)', () => {
    const state: ControllerState = stateFor(full, { demand: { beta: T } });
    assert.equal(pass(state, T + 1, []).state.models, state.models);
  });
});

/**
 * #23, "two replacements at once": a definition-change rollout of 2 replicas ran 4 llama-server
 * processes. The interleaving: the first replacement's start concludes ready while a pass is looking
 * at the nodes, and that look began before the replacement's replica was on its node. The start has
 * left the in-flight set and the look does not show its replica: the pass saw two outdated replicas,
 * none current, stopped nothing (none ready to take over) and started a second replacement beside
 * the first — old, old, new, new.
 */
describe('a pass decides (a rolling replacement concluded ready, and looks taken before and after)', async () => {
  const rolled = await specOf((f) => {
    f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2').replace('alpha-q4.gguf', 'alpha-q5.gguf');
    delete f['models/beta.yaml'];
    delete f['models/gamma.yaml'];
  });
  const d2 = rolled.models.alpha!.digest;
  const oldA = observed(rolled, 'alpha-a', 'alpha', 'ready', { digest: 'previous', startedAt: 1 });
  const oldB = observed(rolled, 'alpha-b', 'alpha', 'ready', { digest: 'previous', startedAt: 2 });
  const newC = (state: 'starting' | 'ready') => observed(rolled, 'alpha-c', 'alpha', state, { startedAt: 3 });
  const T = 5_000_000;
  const LAUNCHED = T;
  const EARLY_LOOK = T + 100; // before alpha-c was on its node
  const READY = T + 900; // the start concluded ready
  const LATE_LOOK = T + 1000; // after it did
  const NOW = T + 1200;
  // the pass that launched alpha-c (surge-first, on the other node), then its outcome
  const launched = startLaunched(stateFor(rolled), 'alpha-c', { model: 'alpha', node: 'cpu-02', digest: d2, startedAt: LAUNCHED });
  const ready = startConcluded(launched, 'alpha-c', { kind: 'ready' }, READY, rolled.settings).state;
  const look = (name: string, at: number, replicas: ReturnType<typeof observed>[] = [], reachable = true): ObservedNode => ({ ...node(name, replicas, reachable), lookedAt: at });

  /** gone: alpha-c's process is no more (otherwise it lives, shown or not). */
  const table: { name: string; state: ControllerState; nodes: ObservedNode[]; running?: string[]; gone?: true; starts: string[]; stops: string[]; counted: boolean }[] = [
    {
      name: 'concluded ready after a look that began before its replica was on the node: still the one replacement in progress — no second start, nothing stopped',
      state: ready,
      nodes: [look('cpu-01', EARLY_LOOK, [oldA, oldB]), look('cpu-02', EARLY_LOOK)],
      starts: [],
      stops: [],
      counted: true,
    },
    {
      name: 'the same, with the start not yet gone from the running set: the same',
      state: ready,
      nodes: [look('cpu-01', EARLY_LOOK, [oldA, oldB]), look('cpu-02', EARLY_LOOK)],
      running: ['alpha-c'],
      starts: [],
      stops: [],
      counted: true,
    },
    {
      name: 'a look from before its outcome shows it starting: it stands for itself, nothing planned',
      state: ready,
      nodes: [look('cpu-01', EARLY_LOOK, [oldA, oldB]), look('cpu-02', EARLY_LOOK, [newC('starting')])],
      starts: [],
      stops: [],
      counted: false,
    },
    {
      name: 'a look begun after its outcome shows it ready: the oldest old replica is stopped, the next replacement waits for that stop',
      state: ready,
      nodes: [look('cpu-01', LATE_LOOK, [oldA, oldB]), look('cpu-02', LATE_LOOK, [newC('ready')])],
      starts: [],
      stops: ['alpha-a (replaced)'],
      counted: false,
    },
    {
      name: 'its node unreachable since a look from before: unknown, still counted, nothing planned',
      state: ready,
      nodes: [look('cpu-01', LATE_LOOK, [oldA, oldB]), look('cpu-02', EARLY_LOOK, [], false)],
      starts: [],
      stops: [],
      counted: true,
    },
    {
      name: 'a look begun after its outcome does not show it (gone from its node): forgotten, and replaced by one start',
      state: ready,
      nodes: [look('cpu-01', LATE_LOOK, [oldA, oldB]), look('cpu-02', LATE_LOOK)],
      gone: true,
      starts: ['alpha@cpu-02'],
      stops: [],
      counted: false,
    },
    {
      name: 'still running (no outcome yet), a look from before its replica was there: in flight, nothing planned',
      state: launched,
      nodes: [look('cpu-01', EARLY_LOOK, [oldA, oldB]), look('cpu-02', EARLY_LOOK)],
      running: ['alpha-c'],
      starts: [],
      stops: [],
      counted: true,
    },
  ];
  for (const c of table) {
    it(c.name, () => {
      const d = run(c.state, c.nodes, { spec: rolled, now: NOW, running: new Set(c.running ?? []) });
      assert.deepEqual(starts(d), c.starts);
      assert.deepEqual(stops(d), c.stops);
      assert.equal(asV2(d.state).starts['alpha-c'] !== undefined, c.counted, 'the record of alpha-c');
      // never more than replicas + 1 processes: those the looks show, alpha-c where they do not, this pass's starts
      const shown = new Set(c.nodes.flatMap((n) => n.replicas.map((r) => r.id)));
      const processes = shown.size + (shown.has('alpha-c') || c.gone ? 0 : 1) + starts(d).length;
      assert.ok(processes <= 3, `${processes} alpha processes`);
    });
  }

  it('the record of a ready start survives a restart and a clock step; a second outcome changes nothing', () => {
    assert.deepEqual(asV2(stateFromJson(JSON.parse(JSON.stringify(ready)))).starts, asV2(ready).starts);
    assert.equal(asV2(clockStepped(ready, 7_200_000)).starts['alpha-c']!.readyAt, READY + 7_200_000);
    assert.equal(startConcluded(ready, 'alpha-c', { kind: 'failed', error: kev }, NOW, rolled.settings).state, ready);
  });
});
