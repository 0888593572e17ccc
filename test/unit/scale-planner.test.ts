/**
 * The planner on a scaling model's count (#42): the extra replicas start where they fit; where fewer
 * fit than the load wants, the model serves at its floor — short ("wants 3, 2 fit"), never
 * unplaceable, evicting nobody for an extra; scaling in stops an idle replica before a busy one.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { initialHealth, type ModelHealth } from '../../src/reconciler/health.js';
import { planPass, type ObservedNode, type PlanInput } from '../../src/reconciler/planner.js';
import { scaleText } from '../../src/format/ctl-format.js';
import { GiB, node, observed, specOf } from '../harness/reconciler-core.js';

const spec = await specOf((f) => {
  f['models/beta.yaml'] = f['models/beta.yaml']!.replace('on_demand: { idle_timeout: 10m }', 'on_demand: { idle_timeout: 10m, max_replicas: 3 }');
  f['models/delta.yaml'] = f['models/beta.yaml']!.replace('max_replicas: 3', 'max_replicas: 1');
  f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 0');
  f['models/gamma.yaml'] = f['models/gamma.yaml']!.replace('replicas: 1', 'replicas: 0');
});
const NOW = 1_000_000;
const replica = (id: string, model: string, extra: Partial<ReplicaObservation> = {}): ReplicaObservation => observed(spec, id, model, 'ready', extra);
/** One node (cpu-01's file declares 16 GiB: room for two 6 GiB replicas, 3 GiB left, with the 1 GiB reserve). */
const small = (replicas: ReplicaObservation[]): ObservedNode => ({ ...node('cpu-01', replicas), memoryTotalBytes: 14 * GiB });

function input(over: Partial<PlanInput>): PlanInput {
  let n = 0;
  const health: Record<string, ModelHealth> = {};
  for (const m of Object.values(spec.models)) health[m.name] = initialHealth(m.digest);
  return {
    spec,
    nodes: [node('cpu-01'), node('cpu-02')],
    health,
    inflightStarts: [],
    stopping: new Set(),
    demand: { beta: { lastRequestAt: NOW - 1000 } },
    restarts: new Set(),
    draining: {},
    memory: Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])),
    accountedFailures: new Set(),
    now: NOW,
    newReplicaId: (model) => `${model}-new${++n}`,
    ...over,
  };
}

const summary = (out: ReturnType<typeof planPass>): string[] =>
  out.actions.map((a) => (a.kind === 'start' ? `start ${a.model} on ${a.node}` : `stop ${a.replicaId} (${a.reason})`)).sort();

describe('the planner on a scaling model', () => {
  it('an active on-demand model scaled to 3: two more beside its ready one, spread; idle, none (its count is not read)', () => {
    const out = planPass(input({ nodes: [node('cpu-01', [replica('beta-1', 'beta')]), node('cpu-02')], scaled: { beta: 3 } }));
    assert.equal(out.desired.beta, 3);
    assert.deepEqual(summary(out), ['start beta on cpu-01', 'start beta on cpu-02']);
    const idle = planPass(input({ nodes: [node('cpu-01', [replica('beta-1', 'beta')])], scaled: { beta: 3 }, demand: { beta: { lastRequestAt: NOW - 11 * 60_000 } } }));
    assert.equal(idle.desired.beta, 0);
    assert.deepEqual(summary(idle), ['stop beta-1 (idle)']);
  });

  it('room for 2 of the 3 wanted: one more starts, and the model is short, not unplaceable', () => {
    const out = planPass(input({ nodes: [small([replica('beta-1', 'beta')])], scaled: { beta: 3 } }));
    assert.deepEqual(summary(out), ['start beta on cpu-01']);
    assert.deepEqual(out.unplaceable, {});
    assert.equal(out.short?.beta?.wants, 3);
    assert.equal(out.short?.beta?.fit, 2);
    assert.equal(out.short?.beta?.code, 'PLACEMENT_NO_ROOM');
    // the next pass, both ready: nothing to do, still short
    const next = planPass(input({ nodes: [small([replica('beta-1', 'beta'), replica('beta-2', 'beta')])], scaled: { beta: 3 } }));
    assert.deepEqual(next.actions, []);
    assert.deepEqual(next.unplaceable, {});
    assert.equal(next.short?.beta?.fit, 2);
  });

  it('an extra replica evicts nobody: an idle on-demand replica of another model keeps its room', () => {
    const world = [small([replica('beta-1', 'beta'), replica('delta-1', 'delta')])];
    const out = planPass(input({ nodes: world, scaled: { beta: 3 }, demand: { beta: { lastRequestAt: NOW - 1000 }, delta: { lastRequestAt: NOW - 5 * 60_000 } } }));
    assert.deepEqual(summary(out), []);
    assert.deepEqual(out.unplaceable, {});
    assert.deepEqual({ wants: out.short?.beta?.wants, fit: out.short?.beta?.fit }, { wants: 3, fit: 1 });
  });

  it('another model\'s activation takes the room of an extra replica (the newest idle one), never the last, however recent its load', () => {
    // beta runs 2 (its count), asked for a moment ago; delta asked for now needs a 6 GiB room: beta's newer replica gives it up
    const world = [small([replica('beta-1', 'beta', { startedAt: 1000 }), replica('beta-2', 'beta', { startedAt: 2000 })])];
    const demand = { beta: { lastRequestAt: NOW }, delta: { lastRequestAt: NOW - 100 } };
    const out = planPass(input({ nodes: world, scaled: { beta: 2 }, demand }));
    assert.deepEqual(summary(out), ['stop beta-2 (evicted)']);
    // at its floor (one replica), beta gives nothing up: delta is unplaceable
    const memory = { ...Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes])), beta: 10 * GiB };
    const one = planPass(input({ nodes: [small([replica('beta-1', 'beta')])], scaled: { beta: 1 }, demand, memory }));
    assert.deepEqual(summary(one), []);
    assert.equal(one.unplaceable.delta?.code, 'PLACEMENT_NO_ROOM');
  });

  it('scaling in stops a replica with nothing in flight before a busy one, whatever their age', () => {
    const world = [node('cpu-01', [replica('beta-1', 'beta', { startedAt: 1000 }), replica('beta-2', 'beta', { startedAt: 2000 }), replica('beta-3', 'beta', { startedAt: 3000 })])];
    const out = planPass(input({ nodes: world, scaled: { beta: 2 }, busy: new Set(['beta-1', 'beta-3']) }));
    assert.deepEqual(summary(out), ['stop beta-2 (surplus)']);
    // none busy: the newest goes (the oldest has the warmest cache)
    assert.deepEqual(summary(planPass(input({ nodes: world, scaled: { beta: 2 } }))), ['stop beta-3 (surplus)']);
  });

  it('ctl status says the count of its range and why', () => {
    const at = '2026-01-01T00:10:00.000Z';
    const last = { at: '2026-01-01T00:08:00.000Z', from: 1, to: 3, direction: 'up' as const, why: '1 busy and 5 waiting on 1 slot for 10 s (target 80 % busy)' };
    assert.match(scaleText({ min: 1, max: 3, count: 3, last, short: null }, 3, at), /^desired 3 of 1\.\.3: scaled 1 → 3 .*ago: 1 busy and 5 waiting on 1 slot for 10 s \(target 80 % busy\)$/);
    assert.equal(scaleText({ min: 1, max: 3, count: 3, last, short: { wants: 3, fit: 2, code: 'PLACEMENT_NO_ROOM', reason: 'needs 6.0 GiB; largest free is 1.0 GiB on cpu-01' } }, 3, at), 'desired 3 of 1..3: wants 3, 2 fit: needs 6.0 GiB; largest free is 1.0 GiB on cpu-01');
    assert.equal(scaleText({ min: 1, max: 3, count: 0, last: null, short: null }, 0, at), 'desired 0 of 1..3: idle');
  });
});
