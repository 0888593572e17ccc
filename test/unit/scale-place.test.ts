/**
 * Placement of a scaling model's extra replicas (#42): the cores rule (an extra goes only where
 * threads × (the model's replicas there + 1) ≤ the node's cores), extras placed after every floor (an
 * activation's room never goes back to the extra it came from), and an activation taking a surplus
 * replica, idle or busy (drained), before anyone's last one; scale-in by fewest in flight.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { initialHealth, type ModelHealth } from '../../src/reconciler/health.js';
import { placeInOrder } from '../../src/reconciler/place-order.js';
import { coresAllow, place, type PlacementNode, type PlacementRequest } from '../../src/reconciler/placement.js';
import { planPass, type ObservedNode, type PlanInput } from '../../src/reconciler/planner.js';
import { GiB, node, observed, specOf } from '../harness/reconciler-core.js';

describe('the cores rule (placement.ts coresAllow)', () => {
  const table: [threads: number | null, cores: number | null | undefined, onNode: number, allowed: boolean][] = [
    [1, 2, 0, true],
    [1, 2, 1, true], // 1 × 2 ≤ 2
    [1, 2, 2, false], // a third on 2 cores competes
    [2, 4, 1, true],
    [2, 4, 2, false],
    [2, 3, 1, false], // 2 × 2 > 3
    [4, 2, 0, false], // more threads than the node has cores: none fits there
    [null, 8, 0, true], // threads unset: every core, so one replica per node
    [null, 8, 1, false],
    [1, null, 5, true], // cores not known: not held back
    [1, undefined, 5, true],
    [1, 0, 5, true], // an observation that read no cores: not known
  ];
  for (const [threads, cores, onNode, allowed] of table) {
    it(`threads ${threads}, ${cores} cores, ${onNode} there: ${allowed ? 'one more fits' : 'none'}`, () => {
      assert.equal(coresAllow(threads, cores, onNode), allowed);
    });
  }
});

describe('place() with the cores rule', () => {
  const n = (name: string, cores: number | null): PlacementNode => ({ name, labels: {}, capacityBytes: 64 * GiB, usedBytes: 0, reachable: true, cores });
  const req = (over: Partial<PlacementRequest>): PlacementRequest => ({ model: 'm', count: 1, memoryBytes: GiB, nodeSelector: {}, existingOn: [], ...over });

  it('an extra goes to a node whose cores the model does not take yet; where none is, PLACEMENT_NO_CORES with the numbers', () => {
    const [r] = place({ nodes: [n('a', 2), n('b', 2)], requests: [req({ count: 3, existingOn: ['a', 'a'], cores: { threads: 1 } })], reserveBytes: 0 });
    assert.deepEqual(r!.nodes, ['b', 'b']);
    assert.equal(r!.unplaceable?.code, 'PLACEMENT_NO_CORES');
    assert.equal(r!.unplaceable?.reason, 'each replica runs 1 thread; a: 2 of its 2 cores taken by 2 replicas of it, b: 2 of its 2 cores taken by 2 replicas of it (another would compete for them); 2 nodes checked; placed 2 of 3');
    assert.deepEqual(r!.unplaceable?.cores, { threads: 1, nodes: [{ node: 'a', cores: 2, replicas: 2 }, { node: 'b', cores: 2, replicas: 2 }] });
  });

  it('threads unset: one replica per node; without the rule (a floor, a fixed count) memory alone decides', () => {
    const [r] = place({ nodes: [n('a', 8)], requests: [req({ existingOn: ['a'], cores: { threads: null } })], reserveBytes: 0 });
    assert.deepEqual(r!.nodes, []);
    assert.match(r!.unplaceable!.reason, /^each replica runs a thread on every core \(the profile sets no threads\); a: 8 of its 8 cores taken by 1 replica of it/);
    const [free] = place({ nodes: [n('a', 8)], requests: [req({ existingOn: ['a'] })], reserveBytes: 0 });
    assert.deepEqual(free!.nodes, ['a']);
  });

  it('memory is placement\'s reason where no node has the room: the cores only where the memory was there', () => {
    const [r] = place({ nodes: [{ ...n('a', 2), usedBytes: 63.5 * GiB }], requests: [req({ existingOn: ['a', 'a'], cores: { threads: 1 } })], reserveBytes: 0 });
    assert.equal(r!.unplaceable?.code, 'PLACEMENT_NO_ROOM');
    const [unknown] = place({ nodes: [n('a', null)], requests: [req({ count: 2, existingOn: ['a', 'a'], cores: { threads: 1 } })], reserveBytes: 0 });
    assert.deepEqual(unknown!.nodes, ['a', 'a']);
  });
});

describe('the extras\' short reason (place-order.ts)', () => {
  const n = (name: string, usedBytes: number): PlacementNode => ({ name, labels: {}, capacityBytes: 2.5 * GiB, usedBytes, reachable: true, cores: 8 });
  const req = (count: number, existingOn: string[]): PlacementRequest => ({ model: 'm', count, memoryBytes: GiB, nodeSelector: {}, existingOn, cores: { threads: 1 } });
  const shortOf = (extraCount: number, existing: number, usedBytes: number): string | undefined =>
    placeInOrder([{ onDemand: false, recency: 0, floor: req(0, Array(existing).fill('a')), extra: req(extraCount, Array(existing).fill('a')) }], () => [n('a', usedBytes)], 0, () => {})[0]!.extraUnplaceable?.reason;

  it('the same words whether this pass places 1 of 2 extras or 0 of the 1 left: "per replica", no "placed K of N"', () => {
    // wants 3 on a node with room for 2: from 1 running, 2 extras wanted, 1 fits; then with 2 running, 1 wanted, none fits
    const both = shortOf(2, 1, 1 * GiB);
    const one = shortOf(1, 2, 2 * GiB);
    assert.equal(both, 'needs 1 GiB per replica; largest free 512 MiB on a; 1 node checked');
    assert.equal(one, both);
  });
});

const spec = await specOf((f) => {
  f['models/beta.yaml'] = f['models/beta.yaml']!.replace('on_demand: { idle_timeout: 10m }', 'on_demand: { idle_timeout: 10m, max_replicas: 3 }');
  f['models/delta.yaml'] = f['models/beta.yaml']!.replace('max_replicas: 3', 'max_replicas: 1');
  f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: { min: 1, max: 3 }');
  f['models/gamma.yaml'] = f['models/gamma.yaml']!.replace('replicas: 1', 'replicas: 0');
  f['profiles/chat.yaml'] = f['profiles/chat.yaml']! + 'threads: 2\n';
});
const NOW = 1_000_000;
const replica = (id: string, model: string, extra: Partial<ReplicaObservation> = {}): ReplicaObservation => observed(spec, id, model, 'ready', extra);
/** cpu-01 declares 16 GiB (15 with the reserve): alpha 4 GiB, beta and delta 6 GiB each. */
const cpu01 = (replicas: ReplicaObservation[], cpus?: number): ObservedNode => ({ ...node('cpu-01', replicas), memoryTotalBytes: 16 * GiB, ...(cpus ? { cpus } : {}) });

function input(over: Partial<PlanInput>): PlanInput {
  let n = 0;
  const health: Record<string, ModelHealth> = {};
  for (const m of Object.values(spec.models)) health[m.name] = initialHealth(m.digest);
  return {
    spec, nodes: [cpu01([])], health, inflightStarts: [], stopping: new Set(), demand: {}, restarts: new Set(), draining: {},
    memory: Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])), accountedFailures: new Set(), now: NOW,
    newReplicaId: (model) => `${model}-new${++n}`,
    ...over,
  };
}
const summary = (out: ReturnType<typeof planPass>): string[] =>
  out.actions.map((a) => (a.kind === 'start' ? `start ${a.model} on ${a.node}` : `stop ${a.replicaId} (${a.reason})`)).sort();

describe('the planner: extras under the cores rule, after every floor', () => {
  it('a node of 4 cores takes 2 replicas of threads 2: the third wanted is short with the cores\' reason, never unplaceable', () => {
    const out = planPass(input({ nodes: [cpu01([replica('alpha-1', 'alpha')], 4)], scaled: { alpha: 3 } }));
    assert.deepEqual(summary(out), ['start alpha on cpu-01']);
    assert.deepEqual(out.unplaceable, {});
    assert.deepEqual(out.short?.alpha, { wants: 3, fit: 2, code: 'PLACEMENT_NO_CORES', reason: 'each replica runs 2 threads; cpu-01: 4 of its 4 cores taken by 2 replicas of it (another would compete for them); 1 node checked' });
  });

  it('the floor is placed whatever the cores: min 2 on a 2-core node starts both', () => {
    const s2 = planPass(input({ nodes: [cpu01([], 2)], scaled: { alpha: 2 }, spec: { ...spec, models: { ...spec.models, alpha: { ...spec.models.alpha!, scaling: { mode: 'replicas', replicas: 2, max: 3 } } } } }));
    assert.deepEqual(summary(s2), ['start alpha on cpu-01', 'start alpha on cpu-01']);
  });

  it('an activation\'s room goes to it, not back to the extra that gave it up: the on-demand floor is placed before any extra', () => {
    // alpha (min 1) wants 3 and runs 1; delta asked for a moment ago: delta starts, alpha's extras do not take its room
    const memory = { ...Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])), alpha: 6 * GiB };
    const out = planPass(input({ nodes: [cpu01([replica('alpha-1', 'alpha')])], scaled: { alpha: 3 }, memory, demand: { delta: { lastRequestAt: NOW - 1000 } } }));
    assert.deepEqual(summary(out), ['start delta on cpu-01']);
    assert.equal(out.short?.alpha?.fit, 1);
    assert.equal(out.short?.alpha?.code, 'PLACEMENT_NO_ROOM');
  });

  it('an activation takes a busy surplus replica (drained) before anyone\'s last one, and an idle surplus before a busy one', () => {
    const world = [cpu01([replica('beta-1', 'beta', { startedAt: 1000 }), replica('beta-2', 'beta', { startedAt: 2000 })])];
    const demand = { beta: { lastRequestAt: NOW }, delta: { lastRequestAt: NOW - 100 } };
    // both of beta's replicas serve: the newer one goes (its requests drain), not the first
    const busy = planPass(input({ nodes: world, scaled: { beta: 2 }, demand, busy: new Set(['beta-1', 'beta-2']), inFlight: new Map([['beta-1', 1], ['beta-2', 1]]) }));
    assert.deepEqual(summary(busy), ['stop beta-2 (evicted)']);
    assert.deepEqual(busy.waitingForRoom, []);
    // the newer goes whatever is in flight: which replica was between two requests at the pass does not pick it
    const fewer = planPass(input({ nodes: world, scaled: { beta: 2 }, demand, busy: new Set(['beta-2']), inFlight: new Map([['beta-1', 0], ['beta-2', 2]]) }));
    assert.deepEqual(summary(fewer), ['stop beta-2 (evicted)']);
    // an idle surplus of alpha ({min 1, max 3}) goes before a busy one of beta
    const mixed = [cpu01([replica('beta-1', 'beta', { startedAt: 1000 }), replica('beta-2', 'beta', { startedAt: 2000 })]), { ...node('cpu-02', [replica('alpha-1', 'alpha', { startedAt: 1000 }), replica('alpha-2', 'alpha', { startedAt: 3000 })]), memoryTotalBytes: 12 * GiB }];
    const memory = { ...Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])), alpha: 5 * GiB };
    const idleFirst = planPass(input({ nodes: mixed, scaled: { beta: 2, alpha: 2 }, demand, memory, busy: new Set(['beta-1', 'beta-2']), inFlight: new Map([['beta-1', 1], ['beta-2', 1], ['alpha-1', 0], ['alpha-2', 0]]) }));
    assert.deepEqual(summary(idleFirst), ['stop alpha-2 (evicted)']);
  });

  it('the next pass, the surplus gone: the activation starts there and the scaling model is short, not taking the room back', () => {
    // alpha (1 GiB here) at its floor beside beta's first replica: 8 GiB left, room for delta or beta's extra, not both
    const world = [cpu01([replica('alpha-1', 'alpha'), replica('beta-1', 'beta', { startedAt: 1000 })])];
    const memory = { ...Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])), alpha: GiB };
    const out = planPass(input({ nodes: world, memory, scaled: { beta: 2 }, demand: { beta: { lastRequestAt: NOW }, delta: { lastRequestAt: NOW - 100 } }, busy: new Set(['beta-1']) }));
    assert.deepEqual(summary(out), ['start delta on cpu-01']);
    assert.deepEqual({ wants: out.short?.beta?.wants, fit: out.short?.beta?.fit }, { wants: 2, fit: 1 });
  });

  it('scale-in stops the replica with the fewest requests in flight', () => {
    const world = [node('cpu-01', [replica('alpha-1', 'alpha', { startedAt: 1000 }), replica('alpha-2', 'alpha', { startedAt: 2000 }), replica('alpha-3', 'alpha', { startedAt: 3000 })])];
    const out = planPass(input({ nodes: world, scaled: { alpha: 2 }, busy: new Set(['alpha-1', 'alpha-2', 'alpha-3']), inFlight: new Map([['alpha-1', 2], ['alpha-2', 1], ['alpha-3', 2]]) }));
    assert.deepEqual(summary(out), ['stop alpha-2 (surplus)']);
  });
});
