/** Table tests of the reconciler's pure transitions: the state record, outcomes, liveness, wake, availability. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { demandResultOf, phaseOf, settledOf } from '../../src/reconciler/availability.js';
import { initialHealth, startFailed } from '../../src/reconciler/health.js';
import { liveness } from '../../src/reconciler/liveness.js';
import { replicaFailed, startConcluded } from '../../src/reconciler/outcomes.js';
import {
  clockStepped,
  demanded,
  emptyState,
  MAX_HANDLED_RETRIES,
  RETRY_CHUNK,
  restartRequested,
  retryHandled,
  specApplied,
  specModelsApplied,
  startLaunched,
  STATE_VERSION,
  type ControllerState,
} from '../../src/reconciler/state.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { edgeAllowed, moved, REPLICA_EDGES, type PhaseName } from '../../src/reconciler/replica-life.js';
import { asV2, fromV2, withV2 } from '../harness/record-v2.js';
import type { ModelView } from '../../src/reconciler/view.js';
import { nextWake, ROOM_RECHECK_MS, wakeAfterPass } from '../../src/reconciler/wake.js';
import { node, observed, specOf, stateFor } from '../harness/reconciler-core.js';
import { modelView } from '../harness/views.js';

const spec = await specOf();
const S = spec.settings;
const alpha = spec.models.alpha!;
const kev = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
const unreachable = { code: 'NODE_UNREACHABLE', message: 'connect ECONNREFUSED' };
const start = (model = 'alpha', node = 'cpu-01', startedAt = 0): { model: string; node: string; digest: string; startedAt: number } => ({ model, node, digest: spec.models[model]!.digest, startedAt });

describe('state record', () => {
  it('reads version 1 files (health, retries, revision) and fills the rest empty', () => {
    const s = stateFromJson({ version: 1, appliedRevision: 'r1', models: { alpha: initialHealth('d') }, handledRetries: ['c1:alpha'] });
    assert.deepEqual(s, { ...emptyState, appliedRevision: 'r1', models: { alpha: { health: initialHealth('d') } }, handledRetries: ['c1:alpha'] });
  });
  it('reads every fact of version 2 into one entry per model and per replica, and round-trips version 3 through JSON', () => {
    const v2 = { starts: { a1: start(), b1: { ...start('beta'), readyAt: 3, endpoint: 'http://b' } }, demand: { beta: 5 }, restarts: { g1: 6 }, draining: { g0: 7 }, readySince: { g1: 8 }, unresponsiveSince: { h1: 9 }, accounted: { a0: 10 }, stops: { s1: { model: 'alpha', node: 'cpu-01', reason: 'surplus', since: 11, drain: true } }, avoid: { 'alpha@cpu-02': 12 }, handledRetries: ['x'] };
    const s = stateFor(spec, v2);
    assert.equal(s.version, STATE_VERSION);
    assert.deepEqual(s.replicas.a1, { ...start(), phase: { kind: 'launching' } });
    assert.deepEqual(s.replicas.b1, { ...start('beta'), phase: { kind: 'ready', since: 3, seen: false, endpoint: 'http://b' } });
    assert.deepEqual(s.replicas.g1, { model: '', node: '', digest: '', startedAt: 0, phase: { kind: 'ready', since: 8, seen: true }, restartAsked: 6 }, 'a fact by id alone: model and node from the first look');
    assert.deepEqual(s.replicas.s1!.phase, { kind: 'leaving', why: 'stop', since: 11, reason: 'surplus', drain: true });
    assert.deepEqual(s.models.alpha!.avoid, { 'cpu-02': 12 });
    assert.equal(s.models.beta!.demand, 5);
    const back = asV2(s);
    for (const k of ['starts', 'demand', 'restarts', 'draining', 'readySince', 'unresponsiveSince', 'accounted', 'stops', 'avoid'] as const) assert.deepEqual(back[k], v2[k], k);
    assert.deepEqual(stateFromJson(JSON.parse(JSON.stringify(s))), s);
  });
  it('refuses a record of a newer version, saying so (never read as empty, never written over)', () => {
    assert.throws(() => stateFromJson({ version: STATE_VERSION + 1, models: {}, handledRetries: [] }), (e: Error & { code?: string }) => e.code === 'STATE_VERSION_NEWER' && /state version 4 is newer than this llmgw \(3\): upgrade this instance/.test(e.message));
  });
  for (const [name, v] of [
    ['truncated', '{"version":2,"models":{'],
    ['not an object', '[]'],
    ['wrong version', '{"version":0,"models":{},"handledRetries":[]}'],
    ['no models', '{"version":2,"handledRetries":[]}'],
  ] as const) {
    it(`refuses a file that is ${name}`, () => {
      assert.throws(() => stateFromJson(JSON.parse(v)), /not an llmgw state record|JSON/);
    });
  }
  it('drops malformed entries instead of trusting them', () => {
    const s = stateFromJson({ version: 2, models: { b: initialHealth('d') }, handledRetries: ['a', 3], starts: { ok: start(), bad: { model: 1 } }, demand: { a: 'x', b: 2 } });
    assert.deepEqual(Object.keys(s.replicas), ['ok']);
    assert.deepEqual(asV2(s).demand, { b: 2 });
    assert.deepEqual(s.handledRetries, ['a']);
    const v3 = stateFromJson({ version: 3, models: { a: { health: initialHealth('d') }, bad: 1 }, replicas: { ok: { ...start(), phase: { kind: 'launching' } }, bad: { ...start(), phase: { kind: 'flying' } } }, handledRetries: [] });
    assert.deepEqual([Object.keys(v3.models), Object.keys(v3.replicas)], [['a'], ['ok']]);
  });
  it('demand records the last request time', () => {
    const s0 = demanded(stateFor(spec), 'beta', 1000);
    assert.equal(demanded(s0, 'beta', 1000), s0, 'the same time leaves the record as it is');
    assert.equal(demanded(s0, 'beta', 1300).models.beta!.demand, 1300);
    assert.equal(demanded(s0, 'beta', 500).models.beta!.demand, 500, 'a clock step back is taken as is');
  });
  it('a clock step moves every timer with it; history (parked since, last failure) stays', () => {
    const h = { ...startFailed(initialHealth(alpha.digest), kev, 100, S), parked: { since: 50, lastError: kev } };
    const s: ControllerState = stateFor(spec, { models: { alpha: h }, starts: { a1: start('alpha', 'cpu-01', 10) }, demand: { beta: 1 }, restarts: { r: 2 }, draining: { d: 3 }, readySince: { g: 4 }, unresponsiveSince: { u: 5 } });
    const t = clockStepped(s, 1000);
    assert.equal(t.models.alpha!.health.nextAttemptAt, h.nextAttemptAt! + 1000);
    assert.equal(t.models.alpha!.health.lastFailureAt, 100);
    assert.equal(t.models.alpha!.health.parked!.since, 50);
    const v = asV2(t);
    assert.equal(v.starts.a1!.startedAt, 1010);
    assert.deepEqual([v.demand, v.restarts, v.draining, v.readySince, v.unresponsiveSince], [{ beta: 1001 }, { r: 1002 }, { d: 1003 }, { g: 1004 }, { u: 1005 }]);
    assert.equal(clockStepped(s, 0), s);
  });
  it('a restart request keeps the time it was first asked', () => {
    const s0 = startLaunched(startLaunched(stateFor(spec), 'a', start()), 'b', start());
    const s = restartRequested(restartRequested(s0, ['a'], 1), ['a', 'b', 'unknown'], 2);
    assert.deepEqual(asV2(s).restarts, { a: 1, b: 2 }, 'a replica the record does not know is not asked to restart');
  });
  it('a retry is handled once per id, and the list of handled ids stays bounded', () => {
    const parked = stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), consecutiveFailures: 5, parked: { since: 1, lastError: kev } } } });
    const a = retryHandled(parked, alpha, 'c1:alpha');
    assert.equal(a.outcome, 'unparked');
    assert.equal(a.state.models.alpha!.health.parked, null);
    assert.equal(retryHandled(a.state, alpha, 'c1:alpha').outcome, 'already-handled');
    const noModel = retryHandled(parked, null, 'c2:ghost');
    assert.equal(noModel.outcome, 'already-handled');
    assert.deepEqual(noModel.state.handledRetries, ['c2:ghost']);
    let s: ControllerState = emptyState;
    for (let i = 0; i < MAX_HANDLED_RETRIES + 5; i++) s = retryHandled(s, null, `c${i}`).state;
    // past the bound the oldest go in one chunk (the etcd layout's keys keep their contents)
    assert.equal(s.retriesTrimmed, RETRY_CHUNK);
    assert.equal(s.handledRetries.length, MAX_HANDLED_RETRIES + 5 - RETRY_CHUNK);
    assert.equal(s.handledRetries[0], `c${RETRY_CHUNK}`);
    assert.equal(s.handledRetries.at(-1), `c${MAX_HANDLED_RETRIES + 4}`);
    for (let i = MAX_HANDLED_RETRIES + 5; s.retriesTrimmed === RETRY_CHUNK; i++) s = retryHandled(s, null, `c${i}`).state;
    assert.equal(s.retriesTrimmed, 2 * RETRY_CHUNK);
    assert.ok(s.handledRetries.length <= MAX_HANDLED_RETRIES && s.handledRetries.length > MAX_HANDLED_RETRIES - RETRY_CHUNK);
  });
  it('the spec in force: a new digest resets and unparks; models that left lose health and demand; no change is the same record', () => {
    const s0 = stateFor(spec, { models: { gone: initialHealth('g') }, demand: { beta: 1, gone: 2 } });
    const parked = withV2(s0, { models: { ...asV2(s0).models, alpha: { ...initialHealth(alpha.digest), consecutiveFailures: 5, parked: { since: 1, lastError: kev } } } });
    const r = specApplied(parked, [{ name: 'alpha', digest: 'new' }, { name: 'beta', digest: spec.models.beta!.digest }]);
    assert.equal(r.state.models.alpha!.health.parked, null);
    assert.equal(r.state.models.alpha!.health.digest, 'new');
    assert.deepEqual(Object.keys(r.state.models).sort(), ['alpha', 'beta']);
    assert.deepEqual(asV2(r.state).demand, { beta: 1 });
    assert.equal(r.notes[0]?.msg, 'definition changed: failures reset, unparked');
    const unchanged = stateFor(spec);
    assert.equal(specApplied(unchanged, Object.values(spec.models)).state, unchanged);
  });
  it('the spec in force, by its models: what specApplied does, skipped only where it would change nothing', () => {
    const s0 = stateFor(spec, { models: { gone: initialHealth('g') }, demand: { beta: 1, gone: 2 } });
    const other = { alpha: { name: 'alpha', digest: 'new' }, beta: spec.models.beta! };
    const first = specModelsApplied(s0, other);
    assert.deepEqual(first, specApplied(s0, Object.values(other)));
    const table: { name: string; before: ControllerState; models: Readonly<Record<string, { name: string; digest: string }>> }[] = [
      { name: 'the record it returned, the same spec models: left as it is', before: first.state, models: other },
      { name: 'a new record with the same models object', before: { ...first.state, replicas: { x: { ...start(), phase: { kind: 'launching' } } } }, models: other },
      { name: 'the same record, another spec (another revision)', before: first.state, models: spec.models },
      { name: 'the record with a model\'s health changed since', before: { ...first.state, models: { ...first.state.models, alpha: { health: { ...first.state.models.alpha!.health, digest: 'older' } } } }, models: other },
      { name: 'the record with a model that left', before: { ...first.state, models: { ...first.state.models, gone: { health: initialHealth('g'), demand: 3 } } }, models: other },
      { name: 'a record never seen', before: s0, models: spec.models },
    ];
    for (const t of table) {
      const want = specApplied(t.before, Object.values(t.models));
      const got = specModelsApplied(t.before, t.models);
      assert.deepEqual(got, want, t.name);
      if (want.state === t.before) assert.equal(got.state, t.before, t.name);
    }
  });
});

describe('start outcomes and replica failures', () => {
  const launched = startLaunched(stateFor(spec), 'a1', start());
  const table: { name: string; run: () => ControllerState; failures: number; parked?: boolean; nextAttemptAt?: number | null; inFlight: boolean; note?: string }[] = [
    { name: 'ready: counts nothing; stays in the record, marked ready, until a look shows its replica', run: () => startConcluded(launched, 'a1', { kind: 'ready' }, 100, S).state, failures: 0, nextAttemptAt: null, inFlight: true, note: 'replica ready' },
    { name: 'failed with a model reason: counted, backoff from the failure', run: () => startConcluded(launched, 'a1', { kind: 'failed', error: kev }, 100, S).state, failures: 1, nextAttemptAt: 100 + S.backoff.initialMs, inFlight: false },
    { name: "failed with the node's reason: not counted, delayed by the initial backoff", run: () => startConcluded(launched, 'a1', { kind: 'failed', error: unreachable }, 100, S).state, failures: 0, nextAttemptAt: 100 + S.backoff.initialMs, inFlight: false },
    { name: 'abandoned (controller stopping): nothing counted', run: () => startConcluded(launched, 'a1', { kind: 'abandoned' }, 100, S).state, failures: 0, nextAttemptAt: null, inFlight: false },
    { name: 'a start concluded twice counts once', run: () => startConcluded(startConcluded(launched, 'a1', { kind: 'failed', error: kev }, 100, S).state, 'a1', { kind: 'failed', error: kev }, 200, S).state, failures: 1, inFlight: false },
    {
      name: 'the same replica seen failed on the node after its start counted it: not counted again',
      run: () => replicaFailed(startConcluded(launched, 'a1', { kind: 'failed', error: kev }, 100, S).state, { model: 'alpha', digest: alpha.digest, replicaId: 'a1', node: 'cpu-01', error: kev }, 300, S).state,
      failures: 1,
      inFlight: false,
    },
    { name: 'a failure of an older definition does not count', run: () => replicaFailed(launched, { model: 'alpha', digest: 'old', replicaId: 'x', node: 'cpu-01', error: kev }, 100, S).state, failures: 0, inFlight: true },
    { name: 'an unknown reason code counts (never uncounted by default)', run: () => replicaFailed(launched, { model: 'alpha', digest: alpha.digest, replicaId: 'x', node: 'cpu-01', error: { code: 'SOMETHING_NEW', message: '?' } }, 100, S).state, failures: 1, inFlight: true },
  ];
  for (const c of table) {
    it(c.name, () => {
      const s = c.run();
      const h = s.models.alpha!.health;
      assert.equal(h.consecutiveFailures, c.failures);
      if (c.nextAttemptAt !== undefined) assert.equal(h.nextAttemptAt, c.nextAttemptAt);
      assert.equal(asV2(s).starts.a1 !== undefined, c.inFlight);
    });
  }
  it(`parks at exactly ${S.parkAfterFailures} failures; a late report after parking changes nothing`, () => {
    let s: ControllerState = stateFor(spec);
    for (let i = 0; i < S.parkAfterFailures; i++) {
      s = startLaunched(s, `a${i}`, start());
      s = startConcluded(s, `a${i}`, { kind: 'failed', error: kev }, i * 1000, S).state;
    }
    assert.deepEqual(s.models.alpha!.health.parked, { since: (S.parkAfterFailures - 1) * 1000, lastError: kev });
    const late = replicaFailed(s, { model: 'alpha', digest: alpha.digest, replicaId: 'late', node: 'cpu-01', error: kev }, 10 ** 9, S).state;
    assert.equal(late.models.alpha!.health.consecutiveFailures, S.parkAfterFailures);
  });
});

describe('a replica\'s life', () => {
  const all: PhaseName[] = ['new', 'launching', 'ready', 'unready', 'leaving:surge', 'leaving:stop'];
  const want: Record<PhaseName, PhaseName[]> = {
    new: ['launching', 'ready', 'unready', 'leaving:surge', 'leaving:stop'],
    launching: ['ready', 'unready', 'leaving:stop'],
    ready: ['unready', 'leaving:surge', 'leaving:stop'],
    unready: ['ready', 'leaving:surge', 'leaving:stop'],
    'leaving:surge': ['leaving:stop'],
    'leaving:stop': [],
  };
  for (const from of all) {
    for (const to of all) {
      if (to === 'new') continue;
      const allowed = from === to || want[from].includes(to);
      it(`${from} → ${to}: ${allowed ? 'allowed' : 'refused'}`, () => assert.equal(edgeAllowed(from, to), allowed));
    }
  }
  it('the table is the one the transitions use', () => assert.deepEqual(REPLICA_EDGES, want));
  it('a refused move keeps the record and says so', () => {
    const stopping = { ...start(), phase: { kind: 'leaving' as const, why: 'stop' as const, since: 1, reason: 'surplus', drain: true } };
    const r = moved(stopping, 'a1', { kind: 'ready', since: 2, seen: true });
    assert.equal(r.rec, stopping);
    assert.deepEqual(r.refused?.fields, { replica: 'a1', from: 'leaving:stop', to: 'ready' });
    assert.equal(moved(undefined, 'a2', { kind: 'launching' }).refused?.msg, 'replica phase change refused: not an edge of its life', 'a new replica needs its model and node');
  });
  it('a start that concluded after its replica was taken into the stop sequence stays stopping; its failure still counts', () => {
    const s0 = startLaunched(stateFor(spec), 'a1', start());
    const stopping = { ...s0, replicas: { a1: { ...s0.replicas.a1!, phase: { kind: 'leaving' as const, why: 'stop' as const, since: 1, reason: 'removed', drain: true } } } };
    assert.equal(startConcluded(stopping, 'a1', { kind: 'ready' }, 5, S).state, stopping);
    const failed = startConcluded(stopping, 'a1', { kind: 'failed', error: kev }, 5, S).state;
    assert.equal(failed.replicas.a1!.phase.kind, 'leaving');
    assert.equal(failed.models.alpha!.health.consecutiveFailures, 1);
  });
});

describe('liveness', () => {
  const limit = spec.profiles.chat!.startTimeoutMs;
  it('a live replica not answering /health is timed from the first look and failed after the start timeout', () => {
    const n = [node('cpu-01', [observed(spec, 'a1', 'alpha', 'starting')])];
    const first = liveness({ state: stateFor(spec), spec, nodes: n, running: new Set(), stopping: new Set(), now: 1000 });
    assert.deepEqual(asV2(first.state).unresponsiveSince, { a1: 1000 });
    assert.equal(first.nodes[0]!.replicas[0]!.state, 'starting');
    const later = liveness({ state: first.state, spec, nodes: n, running: new Set(), stopping: new Set(), now: 1000 + limit });
    assert.equal(later.nodes[0]!.replicas[0]!.state, 'failed');
    assert.equal(later.nodes[0]!.replicas[0]!.failure?.code, 'REPLICA_UNHEALTHY');
  });
  it('a replica whose start runs in this process, or that is being stopped, is not timed here', () => {
    const n = [node('cpu-01', [observed(spec, 'a1', 'alpha', 'starting'), observed(spec, 'a2', 'alpha', 'starting')])];
    const s = startLaunched(stateFor(spec), 'a1', start());
    const r = liveness({ state: s, spec, nodes: n, running: new Set(['a1']), stopping: new Set(['a2']), now: 10 ** 9 });
    assert.deepEqual(asV2(r.state).unresponsiveSince, {});
    assert.deepEqual(r.nodes[0]!.replicas.map((x) => x.state), ['starting', 'starting']);
  });
  it('a replica on an unreachable node neither times out nor keeps its timer', () => {
    const s = stateFor(spec, { unresponsiveSince: { a1: 0 } });
    const r = liveness({ state: s, spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'starting')], false)], running: new Set(), stopping: new Set(), now: 10 ** 9 });
    assert.equal(r.nodes[0]!.replicas[0]!.state, 'starting');
    assert.deepEqual(asV2(r.state).unresponsiveSince, {});
  });
  it('starts inherited from before a restart are settled on the first look at a reachable node; kept while it is unreachable', () => {
    const s = startLaunched(startLaunched(startLaunched(stateFor(spec), 'seen', start()), 'never', start()), 'away', start('gamma', 'cpu-02'));
    const r = liveness({ state: s, spec, nodes: [node('cpu-01', [observed(spec, 'seen', 'alpha', 'starting')]), node('cpu-02', [], false)], running: new Set(), stopping: new Set(), now: 5 });
    assert.deepEqual(Object.keys(asV2(r.state).starts), ['away']);
    assert.deepEqual(r.notes.map((n) => n.msg).sort(), ['start from before a restart never launched its replica: forgotten', 'start from before a restart: replica adopted']);
    assert.deepEqual(asV2(r.state).unresponsiveSince, { seen: 5 }, 'the adopted replica is timed from now on');
  });
  it('a replica that stayed ready resets its model’s failure count; one of an older definition does not', () => {
    const failing = stateFor(spec, { models: { alpha: startFailed(initialHealth(alpha.digest), kev, 0, S) }, readySince: { a1: 0 } });
    const same = liveness({ state: failing, spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'ready')])], running: new Set(), stopping: new Set(), now: S.readyResetMs });
    assert.equal(same.state.models.alpha!.health.consecutiveFailures, 0);
    const old = liveness({ state: failing, spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'ready', { digest: 'old' })])], running: new Set(), stopping: new Set(), now: S.readyResetMs });
    assert.equal(old.state.models.alpha!.health.consecutiveFailures, 1);
    const early = liveness({ state: failing, spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'ready')])], running: new Set(), stopping: new Set(), now: S.readyResetMs - 1 });
    assert.equal(early.state.models.alpha!.health.consecutiveFailures, 1);
  });
  it('an unchanged world leaves the record as it is (nothing to write)', () => {
    const s = liveness({ state: stateFor(spec, { readySince: { a1: 0 } }), spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'ready')])], running: new Set(), stopping: new Set(), now: 5 }).state;
    const r = liveness({ state: s, spec, nodes: [node('cpu-01', [observed(spec, 'a1', 'alpha', 'ready')])], running: new Set(), stopping: new Set(), now: 10 });
    assert.equal(r.state, s);
  });
});

describe('next wake', () => {
  const base = { spec, desired: { beta: 1 }, readyReplicas: () => [], modelOf: () => 'alpha', now: 1000 };
  const table: { name: string; state: ControllerState; want: number | null }[] = [
    { name: 'nothing due', state: stateFor(spec), want: null },
    { name: 'a backoff that ends', state: stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), nextAttemptAt: 5000 } } }), want: 5000 },
    { name: 'a drain grace that ends', state: stateFor(spec, { draining: { r: 900 } }), want: 900 + S.drainGraceMs },
    { name: 'an on-demand model going idle', state: stateFor(spec, { demand: { beta: 800 } }), want: 800 + (spec.models.beta!.scaling.mode === 'on_demand' ? spec.models.beta!.scaling.idleTimeoutMs : 0) },
    { name: 'a replica timed for /health', state: stateFor(spec, { unresponsiveSince: { a1: 700 } }), want: 700 + spec.profiles.chat!.startTimeoutMs },
    { name: 'times in the past are not due again', state: stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), nextAttemptAt: 999 } } }), want: null },
  ];
  for (const c of table) it(c.name, () => assert.equal(nextWake({ ...base, state: c.state }), c.want));
  it('a failure count that resets after a replica stayed ready, and extra due times', () => {
    const s = stateFor(spec, { models: { alpha: { ...startFailed(initialHealth(alpha.digest), kev, 0, S), nextAttemptAt: null } }, readySince: { a1: 500 } });
    assert.equal(nextWake({ ...base, state: s, readyReplicas: (m) => (m === 'alpha' ? ['a1'] : []) }), 500 + S.readyResetMs);
    assert.equal(nextWake({ ...base, state: stateFor(spec), extra: [3000, 2000] }), 2000);
  });
  it('only what the spec still has and wants: a model gone from it, one desired at 0, a parked one are not due; the same health asked again at a later time', () => {
    const failing = { ...startFailed(initialHealth(alpha.digest), kev, 0, S), nextAttemptAt: null };
    const ready = { ...base, readyReplicas: (m: string) => (m === 'alpha' || m === 'gone' ? ['a1'] : []) };
    const table: { name: string; state: ControllerState; desired?: Record<string, number>; want: number | null }[] = [
      { name: 'a failing model gone from the spec', state: stateFor(spec, { models: { gone: failing }, readySince: { a1: 500 } }), want: null },
      { name: 'a parked model with a ready replica', state: stateFor(spec, { models: { alpha: { ...failing, parked: { since: 0, lastError: kev } } }, readySince: { a1: 500 } }), want: null },
      { name: 'demand of an on-demand model desired at 0', state: stateFor(spec, { demand: { beta: 800 } }), desired: {}, want: null },
      { name: 'demand of an always-on model', state: stateFor(spec, { demand: { alpha: 800 } }), desired: { alpha: 1 }, want: null },
      { name: 'demand of a model gone from the spec', state: stateFor(spec, { models: { gone: initialHealth('g') }, demand: { gone: 800 } }), desired: { gone: 1 }, want: null },
    ];
    for (const c of table) assert.equal(nextWake({ ...ready, state: c.state, ...(c.desired ? { desired: c.desired } : {}) }), c.want, c.name);
    const backoff = stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), nextAttemptAt: 5000 } } });
    assert.equal(nextWake({ ...base, state: backoff }), 5000);
    assert.equal(nextWake({ ...base, state: backoff, now: 6000 }), null, 'a due time kept for the same health is still compared with now');
  });
  it('after a pass: a model waiting for a busy replica\'s room is looked at again ROOM_RECHECK_MS after the decision', () => {
    assert.equal(wakeAfterPass({ ...base, state: stateFor(spec), waitingForRoom: true }), base.now + ROOM_RECHECK_MS);
    assert.equal(wakeAfterPass({ ...base, state: stateFor(spec), waitingForRoom: false }), null);
    const s = stateFor(spec, { models: { alpha: { ...initialHealth(alpha.digest), nextAttemptAt: 1500 } } });
    assert.equal(wakeAfterPass({ ...base, state: s, waitingForRoom: true }), 1500, 'the earlier of the two');
  });
});

describe('availability', () => {
  const mv = (over: Partial<ModelView>): ModelView => modelView(alpha, { phase: 'pending', ...over });
  const ready = { id: 'a1', model: 'alpha', node: 'cpu-01', endpoint: 'http://x', phase: 'ready' as const, digest: alpha.digest, startedAt: 0 };
  const u = { code: 'PLACEMENT_NO_ROOM' as const, reason: 'needs 4 GiB', needBytes: 4, largestFree: null, checked: 2, excludedBySelector: 0, unknown: 0, avoided: 0 };
  const phases: [string, Parameters<typeof phaseOf>, string][] = [
    ['parked beats everything', [1, 1, 0, { ...initialHealth('d'), parked: { since: 0, lastError: kev } }, true], 'parked'],
    ['nothing wanted, nothing ready: idle', [0, 0, 0, undefined, false], 'idle'],
    ['nothing wanted, one still ready: ready', [0, 1, 0, undefined, false], 'ready'],
    ['all ready', [2, 2, 0, undefined, false], 'ready'],
    ['some ready', [2, 1, 0, undefined, true], 'degraded'],
    ['none ready, fits nowhere', [1, 0, 1, undefined, true], 'unplaceable'],
    ['none ready, one starting', [1, 0, 1, undefined, false], 'starting'],
    ['none ready, backing off', [1, 0, 0, startFailed(initialHealth('d'), kev, 0, S), false], 'failing'],
    ['none ready, nothing in the way', [1, 0, 0, undefined, false], 'pending'],
  ];
  for (const [name, args, want] of phases) it(`phase: ${name}`, () => assert.equal(phaseOf(...args), want));
  const results: [string, ModelView | null, string][] = [
    ['unknown model', null, 'unplaceable'],
    ['parked', mv({ parked: { since: 1, lastError: kev } }), 'parked'],
    ['ready', mv({ replicas: [ready] }), 'ready'],
    ['unplaceable', mv({ unplaceable: u }), 'unplaceable'],
    ['starting', mv({ replicas: [{ ...ready, phase: 'starting' }] }), 'starting'],
    ['failing', mv({ nextAttemptAt: 5, lastError: kev }), 'failing'],
    ['nothing yet', mv({}), 'starting'],
  ];
  for (const [name, m, want] of results) it(`demand result: ${name}`, () => assert.equal(demandResultOf(m).kind, want));
  it('a wait for ready settles on ready, parked or unplaceable, and keeps waiting otherwise', () => {
    assert.deepEqual(settledOf(mv({ replicas: [ready] })), [ready]);
    assert.deepEqual(settledOf(mv({ unplaceable: u })), []);
    assert.deepEqual(settledOf(mv({ parked: { since: 1, lastError: kev } })), []);
    assert.equal(settledOf(mv({ replicas: [{ ...ready, phase: 'starting' }] })), null);
  });
});
