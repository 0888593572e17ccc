import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { initialHealth, startFailed, type ModelHealth } from '../../src/reconciler/health.js';
import { planPass, type PlanInput } from '../../src/reconciler/planner.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { GiB, node, observed, specOf } from '../harness/reconciler-core.js';

const spec = await specOf();
const digest = (m: string): string => spec.models[m]!.digest;
const replica = (id: string, model: string, state: ReplicaObservation['state'], extra: Partial<ReplicaObservation> = {}): ReplicaObservation => observed(spec, id, model, state, extra);

function input(over: Partial<PlanInput> = {}): PlanInput {
  let n = 0;
  const s = over.spec ?? spec;
  const health: Record<string, ModelHealth> = {};
  for (const m of Object.values(s.models)) health[m.name] = initialHealth(m.digest);
  return {
    spec: s,
    nodes: [node('cpu-01'), node('cpu-02')],
    health,
    inflightStarts: [],
    stopping: new Set(),
    demand: {},
    restarts: new Set(),
    draining: {},
    memory: Object.fromEntries(Object.values(s.models).map((m) => [m.name, m.memoryBytes])),
    accountedFailures: new Set(),
    now: 1_000_000,
    newReplicaId: (model) => `${model}-new${++n}`,
    ...over,
  };
}

const summary = (out: ReturnType<typeof planPass>): string[] =>
  out.actions.map((a) => (a.kind === 'start' ? `start ${a.model} on ${a.node}` : `stop ${a.replicaId} (${a.reason})`)).sort();

describe('action planner', () => {
  it('an empty world: start the always-on models, not the on-demand one nobody asked for', () => {
    const out = planPass(input());
    assert.deepEqual(summary(out), ['start alpha on cpu-01', 'start gamma on cpu-01']);
    assert.deepEqual(out.desired, { alpha: 1, beta: 0, gamma: 1 });
  });

  it('a second pass over an unchanged world plans zero actions (replicas ready)', () => {
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'ready')]), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    const out = planPass(input({ nodes: world }));
    assert.deepEqual(out.actions, []);
    assert.deepEqual(out.failures, []);
    assert.deepEqual(planPass(input({ nodes: world })).actions, []);
  });

  it('starts in flight count: nothing started twice', () => {
    const out = planPass(input({ inflightStarts: [{ replicaId: 'a1', model: 'alpha', node: 'cpu-01', digest: digest('alpha') }, { replicaId: 'g1', model: 'gamma', node: 'cpu-02', digest: digest('gamma') }] }));
    assert.deepEqual(out.actions, []);
  });

  it('a replica that died is reaped and its failure counted once', () => {
    const failure = { code: 'REPLICA_EXITED' as const, message: 'exited', logTail: 'boom' };
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'failed', { failure })]), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    const out = planPass(input({ nodes: world }));
    assert.deepEqual(out.failures.map((f) => f.replicaId), ['alpha-1']);
    assert.deepEqual(summary(out), ['start alpha on cpu-01', 'stop alpha-1 (failed)']);
    const again = planPass(input({ nodes: world, accountedFailures: new Set(['alpha-1']) }));
    assert.deepEqual(again.failures, []);
  });

  it('a parked model is not started; a model in backoff waits', () => {
    const err = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: 'unknown model architecture' };
    const s = { backoff: { initialMs: 10_000, maxMs: 300_000 }, parkAfterFailures: 5, readyResetMs: 600_000 };
    let parked = initialHealth(digest('alpha'));
    for (let i = 0; i < 5; i++) parked = startFailed(parked, err, 0, s);
    const backingOff = startFailed(initialHealth(digest('gamma')), err, 999_000, s);
    const base = input();
    const out = planPass({ ...base, health: { ...base.health, alpha: parked, gamma: backingOff } });
    assert.deepEqual(out.actions, []);
    const later = planPass({ ...base, health: { ...base.health, alpha: parked, gamma: backingOff }, now: 999_000 + 10_000 });
    assert.deepEqual(summary(later), ['start gamma on cpu-01']);
  });

  it('on demand: a request makes it desired; the idle timeout stops it', () => {
    const asked = planPass(input({ demand: { beta: { lastRequestAt: 999_000 } } }));
    assert.ok(summary(asked).some((a) => a.startsWith('start beta on ')), 'placed after the always-on models, against the room they leave');
    assert.equal(asked.desired.beta, 1);
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'ready'), replica('beta-1', 'beta', 'ready')]), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    assert.deepEqual(planPass(input({ nodes: world, demand: { beta: { lastRequestAt: 999_000 } } })).actions, []);
    const idle = planPass(input({ nodes: world, demand: { beta: { lastRequestAt: 1_000_000 - 10 * 60_000 } } }));
    assert.deepEqual(summary(idle), ['stop beta-1 (idle)']);
  });

  it('replicas of a removed model are stopped', () => {
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'ready'), { ...replica('old-1', 'alpha', 'ready'), model: 'old' }]), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    assert.deepEqual(summary(planPass(input({ nodes: world }))), ['stop old-1 (removed)']);
  });

  it('an unreachable node is unknown, never empty: its replicas count and nothing is stopped there', () => {
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'starting')], false), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    assert.deepEqual(planPass(input({ nodes: world })).actions, []);
    const gone = [node('cpu-01', [{ ...replica('x-1', 'alpha', 'ready'), model: 'removed-model' }], false), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    assert.deepEqual(summary(planPass(input({ nodes: gone }))), ['start alpha on cpu-02']);
  });

  it('a definition change rolls surge-first: new beside old, old stopped once new is ready', async () => {
    const changed = await specOf((f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('alpha-q4.gguf', 'alpha-q5.gguf')));
    const old = { ...replica('alpha-old', 'alpha', 'ready'), digest: digest('alpha') };
    const gamma = replica('gamma-1', 'gamma', 'ready');
    const step1 = planPass(input({ spec: changed, nodes: [node('cpu-01', [old]), node('cpu-02', [{ ...gamma, digest: changed.models.gamma!.digest }])] }));
    assert.deepEqual(summary(step1), ['start alpha on cpu-01']);
    const fresh = { ...replica('alpha-new', 'alpha', 'starting'), digest: changed.models.alpha!.digest };
    const step2 = planPass(input({ spec: changed, nodes: [node('cpu-01', [old]), node('cpu-02', [{ ...gamma, digest: changed.models.gamma!.digest }, fresh])] }));
    assert.deepEqual(step2.actions, [], 'the old one serves until the new one is ready');
    const step3 = planPass(input({ spec: changed, nodes: [node('cpu-01', [old]), node('cpu-02', [{ ...gamma, digest: changed.models.gamma!.digest }, { ...fresh, state: 'ready' }])] }));
    assert.deepEqual(summary(step3), ['stop alpha-old (replaced)']);
  });

  it('a restart without room for a second replica drains the old one for the grace, then replaces it', () => {
    const tight = { ...spec, nodes: { 'cpu-01': { ...spec.nodes['cpu-01']!, capacity: { memoryBytes: 6 * GiB, cpus: null } } } } as FleetSpec;
    const tightSpec = { ...tight, models: { alpha: spec.models.alpha! } } as FleetSpec;
    const old = replica('alpha-old', 'alpha', 'ready');
    const base = input({ spec: tightSpec, nodes: [node('cpu-01', [old])], restarts: new Set(['alpha-old']) });
    const step1 = planPass(base);
    assert.deepEqual(step1.actions, []);
    assert.deepEqual(step1.drainStarted, ['alpha-old']);
    const during = planPass({ ...base, draining: { 'alpha-old': 1_000_000 - 60_000 } });
    assert.deepEqual(during.actions, [], 'still serving during the drain grace');
    const after = planPass({ ...base, draining: { 'alpha-old': 1_000_000 - 5 * 60_000 } });
    assert.deepEqual(summary(after), ['stop alpha-old (drained)'], 'its room is not free before its process is gone');
    const stopping = planPass({ ...after.actions.length ? base : base, stopping: new Set(['alpha-old']), draining: {} });
    assert.deepEqual(stopping.actions, [], 'no start while the old one is being stopped');
    assert.deepEqual(stopping.unplaceable, {}, 'waiting for the room, not unplaceable');
    const gone = planPass({ ...base, nodes: [node('cpu-01')], restarts: new Set() });
    assert.deepEqual(summary(gone), ['start alpha on cpu-01'], 'the new one starts in its place');
  });

  it('a rolling model with 2 replicas: one replacement at a time, never more than replicas + 1 processes', async () => {
    const two = await specOf((f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2').replace('alpha-q4.gguf', 'alpha-q5.gguf')));
    const d2 = two.models.alpha!.digest;
    const oldA = { ...replica('alpha-a', 'alpha', 'ready'), startedAt: 1 };
    const oldB = { ...replica('alpha-b', 'alpha', 'ready'), startedAt: 2 };
    const newC = { ...replica('alpha-c', 'alpha', 'ready'), digest: d2, startedAt: 3 };
    const world = (rs: ReplicaObservation[]) => [node('cpu-01', rs), node('cpu-02')];
    const gammaOnly = { ...two, models: { alpha: two.models.alpha! } } as FleetSpec;
    const table: [string, ReplicaObservation[], string[], string[]][] = [
      ['both outdated: one surge start', [oldA, oldB], [], ['start alpha on cpu-02']],
      ['new one ready: the oldest is stopped, the next replacement waits for that stop', [oldA, oldB, newC], [], ['stop alpha-a (replaced)']],
      ['the oldest still stopping: nothing (its process still lives)', [oldA, oldB, newC], ['alpha-a'], []],
      ['its stop finished: the next replacement', [oldB, newC], [], ['start alpha on cpu-02']],
    ];
    for (const [what, rs, stopping, want] of table) {
      const out = planPass(input({ spec: gammaOnly, nodes: world(rs), stopping: new Set(stopping) }));
      assert.deepEqual(summary(out), want, what);
      const processes = rs.length + out.actions.filter((a) => a.kind === 'start').length;
      assert.ok(processes <= 3, `${what}: ${processes} processes`);
    }
  });

  it('a replica being stopped keeps its memory until its process is gone', async () => {
    const tight = await specOf((f) => {
      f['nodes/cpu-01.yaml'] = f['nodes/cpu-01.yaml']!.replace('memory: 16GiB', 'memory: 8GiB');
      delete f['nodes/cpu-02.yaml'];
      f['models/gamma.yaml'] = f['models/gamma.yaml']!.replace('replicas: 1', 'replicas: 0');
    });
    const leaving = replica('gamma-1', 'gamma', 'ready');
    const memory = { ...input({ spec: tight }).memory, gamma: 4 * GiB };
    const out = planPass(input({ spec: tight, nodes: [node('cpu-01', [leaving])], stopping: new Set(['gamma-1']), memory }));
    assert.deepEqual(summary(out), [], 'alpha (4 GiB) does not fit beside a 4 GiB replica still stopping on an 8 GiB node');
    assert.deepEqual(summary(planPass(input({ spec: tight, nodes: [node('cpu-01')], memory }))), ['start alpha on cpu-01'], 'once it is gone, it does');
  });

  it('a model that fits nowhere is unplaceable with need and largest free', async () => {
    const big = await specOf((f) => (f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('memory: 4GiB', 'memory: 100GiB')));
    const out = planPass(input({ spec: big }));
    assert.equal(out.unplaceable.alpha!.code, 'PLACEMENT_NO_ROOM');
    assert.match(out.unplaceable.alpha!.reason, /^needs 100 GiB; largest free 15 GiB on cpu-01; 2 nodes checked$/);
    assert.ok(!summary(out).some((a) => a.includes('alpha')));
  });

  /** One 8 GiB node; beta and delta (a copy of beta) on demand, with room for one of them; alpha and gamma at 0. */
  const twoOnDemandOnOneSmallNode = () =>
    specOf((f) => {
      f['nodes/cpu-01.yaml'] = f['nodes/cpu-01.yaml']!.replace('memory: 16GiB', 'memory: 8GiB');
      delete f['nodes/cpu-02.yaml'];
      f['models/delta.yaml'] = f['models/beta.yaml']!;
      f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 0');
      f['models/gamma.yaml'] = f['models/gamma.yaml']!.replace('replicas: 1', 'replicas: 0');
    });

  it('an on-demand model takes the room of an idle on-demand replica, least recently used first', async () => {
    const s2 = await twoOnDemandOnOneSmallNode();
    const betaRunning = { ...replica('beta-1', 'beta', 'ready'), digest: s2.models.beta!.digest };
    const out = planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.deepEqual(summary(out), ['stop beta-1 (evicted)'], 'the newcomer starts once the victim is gone');
    assert.deepEqual(out.unplaceable, {});
    const demand = { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } };
    const during = planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], stopping: new Set(['beta-1']), demand }));
    assert.deepEqual(summary(during), [], 'waits while the victim stops: no second eviction, no start');
    assert.deepEqual(during.unplaceable, {});
    const after = planPass(input({ spec: s2, nodes: [node('cpu-01')], demand }));
    assert.deepEqual(summary(after), ['start delta on cpu-01']);
  });

  it('a replica with a request in flight is never evicted and never stopped as idle', async () => {
    const s2 = await twoOnDemandOnOneSmallNode();
    const betaRunning = { ...replica('beta-1', 'beta', 'ready'), digest: s2.models.beta!.digest };
    const busy = new Set(['beta-1']);
    const evict = planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], busy, demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.deepEqual(summary(evict), [], 'the newcomer waits');
    assert.deepEqual(evict.unplaceable, {}, 'waiting for the room a busy replica holds, not refused');
    assert.deepEqual(evict.waitingForRoom, ['delta']);
    // once beta's work is done, the eviction comes (delta's waiting request keeps it the more recent)
    const done = planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.deepEqual(summary(done), ['stop beta-1 (evicted)']);
    // a model that would not fit even with the busy replica gone is unplaceable, not waiting
    const s3 = { ...s2, models: { ...s2.models, delta: { ...s2.models.delta!, memoryBytes: 100 * 2 ** 30 } } };
    const never = planPass(input({ spec: s3, nodes: [node('cpu-01', [betaRunning])], busy, demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.equal(never.unplaceable.delta?.code, 'PLACEMENT_NO_ROOM');
    assert.deepEqual(never.waitingForRoom, []);
    const idleFor = s2.models.beta!.scaling.mode === 'on_demand' ? s2.models.beta!.scaling.idleTimeoutMs : 0;
    const idle = { beta: { lastRequestAt: 1_000_000 - idleFor - 1 } };
    assert.deepEqual(summary(planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], demand: idle }))), ['stop beta-1 (idle)']);
    assert.deepEqual(summary(planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], busy, demand: idle }))), [], 'a stream longer than idle_timeout is not cut');
  });

  it('an evicted on-demand model does not evict the one that took its room (no ping-pong)', async () => {
    const s2 = await twoOnDemandOnOneSmallNode();
    const deltaRunning = { ...replica('delta-1', 'beta', 'ready'), model: 'delta', digest: s2.models.delta!.digest };
    // beta was asked for before delta: it waits, unplaceable, instead of evicting delta
    const out = planPass(input({ spec: s2, nodes: [node('cpu-01', [deltaRunning])], demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.deepEqual(out.actions, []);
    assert.match(out.unplaceable.beta!.reason, /needs 6 GiB; largest free 1 GiB on cpu-01/);
  });

  it('an eviction counts the room this pass already gave to other starts (no over-commit)', async () => {
    // one node with 8 GiB of room: beta (6 GiB, idle) runs; gamma (2 GiB) starts; delta (7 GiB) asks.
    // After gamma, evicting beta frees 6 of the 7 delta needs: delta waits, beta keeps running.
    const s2 = await specOf((f) => {
      f['nodes/cpu-01.yaml'] = f['nodes/cpu-01.yaml']!.replace('memory: 16GiB', 'memory: 9GiB');
      delete f['nodes/cpu-02.yaml'];
      f['models/delta.yaml'] = f['models/beta.yaml']!.replace('memory: 6GiB', 'memory: 7GiB');
      f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 0');
      f['models/gamma.yaml'] = f['models/gamma.yaml']!.replace('memory: 1GiB', 'memory: 2GiB');
    });
    const betaRunning = { ...replica('beta-1', 'beta', 'ready'), digest: s2.models.beta!.digest };
    const out = planPass(input({ spec: s2, nodes: [node('cpu-01', [betaRunning])], demand: { beta: { lastRequestAt: 990_000 }, delta: { lastRequestAt: 999_999 } } }));
    assert.deepEqual(summary(out), ['start gamma on cpu-01']);
    assert.equal(out.unplaceable.delta?.code, 'PLACEMENT_NO_ROOM');
  });

  it('scaling down stops extras, starting ones first', async () => {
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', 'ready'), replica('alpha-2', 'alpha', 'starting', { startedAt: 500 })]), node('cpu-02', [replica('gamma-1', 'gamma', 'ready')])];
    assert.deepEqual(summary(planPass(input({ nodes: world }))), ['stop alpha-2 (surplus)']);
  });
});
