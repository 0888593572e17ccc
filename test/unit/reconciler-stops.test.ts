/**
 * The stop sequence (pure): the record a stop leaves, each look at a draining replica, and a pass
 * that decides stops — a stop is in the record from its decision until its process is gone, so a
 * controller restart or a failover continues it; a rolling model's next replacement waits for it.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { decide, pruned, type DecideInput } from '../../src/reconciler/pass.js';
import { stoppingSince } from '../../src/reconciler/pass-look.js';
import type { ObservedNode } from '../../src/reconciler/planner.js';
import { clockStepped, emptyState, healthByModel, type ControllerState } from '../../src/reconciler/state.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { drainStep, mayBeServing, QUIET_MS, stopFinished, stopOf, stopsRequested, type DrainLook, type StopRecord } from '../../src/reconciler/stops.js';
import { ROUTERS_UNREADABLE, routersBehind, THIS_ROUTER, type RoutersSeen } from '../../src/reconciler/routing-acks.js';
import { buildSnapshot, stopPhase } from '../../src/reconciler/summarize.js';
import { startConcluded } from '../../src/reconciler/outcomes.js';
import { readyReplicasOf } from '../../src/reconciler/availability.js';
import { parsePublished, publishedJson, standbySnapshot } from '../../src/ha/published.js';
import { drainingText } from '../../src/format/ctl-format.js';
import { modelJson } from '../../src/wire/shape.js';
import { memoryOf, node, observed, specOf, stateFor } from '../harness/reconciler-core.js';
import { asV2, fromV2, type V2 } from '../harness/record-v2.js';

const spec = await specOf((f) => {
  f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: 2');
  delete f['models/beta.yaml'];
  delete f['models/gamma.yaml'];
});
const GRACE = spec.settings.drainGraceMs;
const rec = (over: Partial<StopRecord> = {}): StopRecord => ({ model: 'alpha', node: 'cpu-01', reason: 'replaced', since: 1000, drain: true, ...over });

function run(state: ControllerState, nodes: readonly ObservedNode[], over: Partial<DecideInput> = {}): ReturnType<typeof decide> {
  let n = 0;
  return decide({ state, spec, nodes, memory: memoryOf(spec), memoryErrors: {}, running: new Set(), stopping: new Set(), now: 100_000, newReplicaId: (m) => `${m}-new${++n}`, ...over });
}

describe('the stop sequence', () => {
  it('a stop that ended during the pass\'s look, its replica seen dead by that look: still stopping, never a crash (stoppingSince)', () => {
    // surplus alpha-2 was stopping when the look began; the look saw its process gone (SIGTERM) and its state
    // still there; the stop ended (its record removed) before the pass decided
    const state = stateFor(spec);
    const dead = observed(spec, 'alpha-2', 'alpha', 'failed', { failure: { code: 'REPLICA_EXITED', message: 'llama-server exited', logTail: '' } });
    const nodes = [node('cpu-01', [observed(spec, 'alpha-1', 'alpha', 'ready'), dead])];
    const failedStops = (d: ReturnType<typeof decide>): string[] => d.actions.flatMap((a) => (a.kind === 'stop' && a.reason === 'failed' ? [a.replicaId] : []));
    const table: [what: string, atLook: string[], now: string[], failed: string[]][] = [
      ['stopping at the look, ended by the decision (the race): no stop as failed', ['alpha-2'], [], []],
      ['stopping at the look and still: none', ['alpha-2'], ['alpha-2'], []],
      ['stopping only now: none', [], ['alpha-2'], []],
      ['never stopping: a crash, stopped as failed', [], [], ['alpha-2']],
    ];
    for (const [what, atLook, now, failed] of table) {
      const d = run(state, nodes, { stopping: stoppingSince(new Set(atLook), new Set(now)) });
      assert.deepEqual(failedStops(d), failed, what);
      assert.equal(healthByModel(d.state).alpha?.consecutiveFailures ?? 0, failed.length, `${what}: failures counted`);
    }
  });

  it('each look at a draining replica: wait while a router may still send it requests or it has some in flight, within drain_grace; otherwise SIGTERM', () => {
    const look = (over: Partial<DrainLook> = {}): DrainLook => ({ inFlight: 0, behind: [], routers: 0, quietSince: null, ...over });
    const GRACE_OVER = 'drain grace over with requests still in flight: stopping the replica';
    const BEHIND_OVER = 'drain grace over with routers still routing from a snapshot that offers the replica: stopping it';
    const table: [string, StopRecord, DrainLook, number, 'wait' | 'terminate', string | null, number | null][] = [
      ['two in flight, just begun', rec(), look({ inFlight: 2 }), 1000, 'wait', null, null],
      ['one in flight, grace nearly over', rec(), look({ inFlight: 1 }), 1000 + GRACE - 1, 'wait', null, null],
      ['nothing in flight, every router without it, first look: waits one more look (a request on the wire)', rec(), look(), 1001, 'wait', null, 1001],
      ['nothing in flight on two looks QUIET_MS apart, every router without it', rec(), look({ quietSince: 1001 }), 1001 + QUIET_MS, 'terminate', 'replica drained: stopping it', null],
      ['the second look came sooner than QUIET_MS: waits, the quiet start kept', rec(), look({ quietSince: 1001 }), 1000 + QUIET_MS, 'wait', null, 1001],
      ['nothing in flight but a standby has not applied the snapshot without it: waits, however long ago it left routing', rec(), look({ behind: ['b'], routers: 2, quietSince: null }), 1000 + GRACE - 1, 'wait', null, null],
      ['a standby behind resets a quiet start', rec(), look({ behind: ['b'], quietSince: 1001 }), 1001 + QUIET_MS, 'wait', null, null],
      ['a request again after a quiet look: the quiet start is dropped', rec(), look({ inFlight: 1, quietSince: 1001 }), 1001 + QUIET_MS, 'wait', null, null],
      ['nothing listens any more, routers behind or not', rec(), look({ inFlight: 'gone', behind: ['b'] }), 1001, 'terminate', 'replica drained: stopping it', null],
      ['slots unknown: waits out the grace', rec(), look({ inFlight: 'unknown' }), 1000 + GRACE - 1, 'wait', null, null],
      ['slots unknown, grace over', rec(), look({ inFlight: 'unknown' }), 1000 + GRACE, 'terminate', GRACE_OVER, null],
      ['still busy when the grace ends: cut, and said so (warn)', rec(), look({ inFlight: 3 }), 1000 + GRACE, 'terminate', GRACE_OVER, null],
      ['routers still behind when the grace ends: stopped, and said so with DRAIN_ROUTERS_BEHIND', rec(), look({ behind: ['b'], routers: 1 }), 1000 + GRACE, 'terminate', BEHIND_OVER, null],
      ['quiet on one look when the grace ends: drained', rec(), look(), 1000 + GRACE, 'terminate', 'replica drained: stopping it', null],
      ['a failed replica does not drain', rec({ reason: 'failed', drain: false }), look({ inFlight: 3, behind: ['b'] }), 1000, 'terminate', 'stopping replica', null],
    ];
    for (const [what, r, l, now, want, msg, quietSince] of table) {
      const step = drainStep('alpha-1', r, l, now, GRACE);
      assert.equal(step.kind, want, what);
      assert.equal(step.note?.msg ?? null, msg, what);
      if (step.kind === 'wait') assert.equal(step.quietSince, quietSince, what);
    }
    const cut = drainStep('a', rec(), look({ inFlight: 3 }), 1000 + GRACE, GRACE);
    assert.equal(cut.note?.level, 'warn');
    const behind = drainStep('a', rec(), look({ inFlight: 0, behind: ['b', 'c'], routers: 2 }), 1000 + GRACE, GRACE);
    assert.equal(behind.note?.level, 'warn');
    assert.equal(behind.note?.fields?.code, 'DRAIN_ROUTERS_BEHIND');
    assert.deepEqual(behind.note?.fields?.behind, ['b', 'c']);
    const drained = drainStep('a', rec(), look({ routers: 2, quietSince: 2000 }), 2000 + QUIET_MS, GRACE);
    assert.deepEqual(drained.note?.fields, { model: 'alpha', node: 'cpu-01', replica: 'a', reason: 'replaced', drainedMs: 1000 + QUIET_MS, routers: 2 });
  });

  it('which routers may still send a draining replica requests: its own snapshot, and every other router below the revision that took it out', () => {
    const seen = (outAt: number | null, routers: RoutersSeen['routers']): RoutersSeen => ({ outAt, routers });
    const table: [string, boolean, RoutersSeen | null, string[]][] = [
      ['a lone controller whose snapshot has it out', true, null, []],
      ['a lone controller whose snapshot still offers it (the next turn publishes it)', false, null, [THIS_ROUTER]],
      ['no other router live', true, seen(null, []), []],
      ['every standby at or past the save that took it out', true, seen(40, [{ id: 'b', applied: 40 }, { id: 'c', applied: 41 }]), []],
      ['a standby whose watch lags', true, seen(40, [{ id: 'b', applied: 39 }, { id: 'c', applied: 41 }]), ['b']],
      ['no save showing it out seen yet: every standby may still offer it', true, seen(null, [{ id: 'b', applied: 41 }]), ['b']],
      ['a router that states no revision (just started, or an older llmgw) counts as behind', true, seen(40, [{ id: 'b', applied: null }]), ['b']],
      ['the routers not readable in etcd', true, seen(40, null), [ROUTERS_UNREADABLE]],
      ['its own snapshot and a standby both behind', false, seen(40, [{ id: 'b', applied: 12 }]), [THIS_ROUTER, 'b']],
    ];
    for (const [what, localOut, s, want] of table) assert.deepEqual(routersBehind(localOut, s), want, what);
  });

  it('which stops drain: every reason a serving replica is stopped for, not failed or orphan replicas', () => {
    for (const r of ['replaced', 'surplus', 'idle', 'drained', 'evicted', 'removed']) assert.ok(mayBeServing(r), r);
    for (const r of ['failed', 'orphan']) assert.ok(!mayBeServing(r), r);
  });

  it('a stop enters the record once (a second decision keeps its start), and leaves it when its process is gone', () => {
    const a = { kind: 'stop' as const, model: 'alpha', node: 'cpu-01', replicaId: 'alpha-1', reason: 'replaced' as const };
    const s1 = stopsRequested(emptyState, [a], 1000);
    assert.deepEqual(s1.added, ['alpha-1']);
    assert.deepEqual(stopOf(s1.state, 'alpha-1'), rec());
    const s2 = stopsRequested(s1.state, [a], 5000);
    assert.equal(s2.state, s1.state, 'a stop decided again is the same stop');
    assert.equal(stopOf(stopFinished(s2.state, 'alpha-1'), 'alpha-1'), undefined);
    const failed = stopOf(stopsRequested(emptyState, [{ ...a, reason: 'failed' }], 1000).state, 'alpha-1')!;
    assert.equal(failed.drain, false);
  });

  it('the record survives a restart (JSON) and a wall-clock step moves its start with the clock', () => {
    const s = fromV2({ stops: { 'alpha-1': rec() } });
    assert.deepEqual(asV2(stateFromJson(JSON.parse(JSON.stringify(s)))).stops, asV2(s).stops);
    assert.deepEqual(asV2(stateFromJson({ ...JSON.parse(JSON.stringify(s)), replicas: { bad: { model: 1, phase: { kind: 'leaving', why: 'stop' } } } })).stops, {});
    assert.equal(stopOf(clockStepped(s, 7_200_000), 'alpha-1')!.since, 1000 + 7_200_000);
  });

  it('a stop in the record outlives the controller: a new one (nothing running) keeps it while the replica is there, drops it once it is gone', () => {
    const s = stateFor(spec, { stops: { 'alpha-1': rec() } });
    const there = [node('cpu-01', [observed(spec, 'alpha-1', 'alpha', 'ready')])];
    assert.deepEqual(asV2(pruned(s, there)).stops, asV2(s).stops);
    assert.deepEqual(asV2(pruned(s, [node('cpu-01')])).stops, {});
    assert.deepEqual(asV2(pruned(s, [node('cpu-01')], new Set(['alpha-1']))).stops, asV2(s).stops, 'a stop this process runs stays until it concludes');
  });

  it('a pass records its stops, and the replica being stopped counts as neither serving nor free room', () => {
    const changed = { ...spec, models: { alpha: { ...spec.models.alpha!, digest: 'new-digest' } } };
    const old = (id: string, startedAt: number) => observed(spec, id, 'alpha', 'ready', { startedAt });
    const fresh = observed(spec, 'alpha-c', 'alpha', 'ready', { digest: 'new-digest', startedAt: 3 });
    const d1 = run(stateFor(changed), [node('cpu-01', [old('alpha-a', 1), old('alpha-b', 2), fresh])], { spec: changed });
    assert.deepEqual(d1.actions.map((a) => `${a.kind} ${a.replicaId}`), ['stop alpha-a']);
    assert.deepEqual(Object.keys(asV2(d1.state).stops), ['alpha-a']);
    // the next pass (the stop still running, or a new controller that inherited the record): nothing more
    const d2 = run(d1.state, [node('cpu-01', [old('alpha-a', 1), old('alpha-b', 2), fresh])], { spec: changed });
    assert.deepEqual(d2.actions, [], 'no second replacement while the first stop runs');
    assert.deepEqual(Object.keys(asV2(d2.state).stops), ['alpha-a']);
    // gone: the record is pruned and the next replacement starts
    const d3 = run(d2.state, [node('cpu-01', [old('alpha-b', 2), fresh])], { spec: changed });
    assert.deepEqual(asV2(d3.state).stops, {});
    assert.deepEqual(d3.actions.map((a) => a.kind), ['start']);
  });

  it('the snapshot shows a replica being stopped as draining with its in-flight count, then stopping — never ready; the model is replacing', () => {
    assert.deepEqual(stopPhase(rec(), undefined), { phase: 'draining', inFlight: null });
    assert.deepEqual(stopPhase(rec(), { phase: 'draining', inFlight: 2 }), { phase: 'draining', inFlight: 2 });
    assert.deepEqual(stopPhase(rec(), { phase: 'stopping', inFlight: 0 }), { phase: 'stopping', inFlight: 0 });
    assert.deepEqual(stopPhase(rec({ drain: false }), undefined), { phase: 'stopping', inFlight: null });
    const obs = { node: 'cpu-01', at: 0, memory: { totalBytes: 1, availableBytes: 1 }, cpus: 1, cpuFlags: [], arch: 'x86_64', diskFreeBytes: 1, engines: [], models: [], replicas: [observed(spec, 'alpha-1', 'alpha', 'ready', { endpoint: 'http://10.0.0.1:20000' })] };
    const snap = buildSnapshot({
      spec, now: 0, leader: true, control: { mode: 'standalone', instance: { id: 'l', label: 'l' }, leader: null, notActing: null, etcd: null }, appliedRevision: null, rejected: null,
      lastSyncOk: null, lastSyncError: null, lastStatusWriteOk: null, stateError: null,
      nodes: new Map([['cpu-01', { reachable: true, error: null, obs, lookedAt: 0, installFailures: {} }]]),
      health: healthByModel(stateFor(spec)), desired: { alpha: 1 }, unplaceable: {},
      replicas: fromV2({ stops: { 'alpha-1': rec() } }).replicas, stopProgress: new Map([['alpha-1', { phase: 'draining', inFlight: 2 }]]), memory: {}, lastPass: null,
    });
    const m = snap.models.find((x) => x.name === 'alpha')!;
    assert.deepEqual(m.replicas.map((r) => [r.phase, r.inFlight]), [['draining', 2]]);
    assert.equal(m.ready, 0);
    assert.equal(m.replacing, true);
    assert.equal(m.phase, 'starting', 'a router holds requests for the replacement rather than refusing them');
    // a standby routes from the published snapshot: draining there too, not offered
    const standby = standbySnapshot(parsePublished(publishedJson(snap)), spec, snap.control, 1);
    assert.deepEqual(readyReplicasOf(standby.models.find((x) => x.name === 'alpha')!), []);
    assert.equal(standby.models.find((x) => x.name === 'alpha')!.replicas[0]!.phase, 'draining');
    // the admin API and ctl show it with its in-flight count
    const mj = modelJson(m, null, 0);
    assert.equal(mj.replicas[0]!.inFlight, 2);
    assert.equal(drainingText(mj), 'draining 1 replica (2 in flight)');
  });

  it('a start that concluded ready is offered to the router at once (with the endpoint it reported), before a look shows it', () => {
    const obs = { node: 'cpu-01', at: 0, memory: { totalBytes: 1, availableBytes: 1 }, cpus: 1, cpuFlags: [], arch: 'x86_64', diskFreeBytes: 1, engines: [], models: [], replicas: [] };
    const snapOf = (starts: V2['starts'], reachable = true) =>
      buildSnapshot({
        spec, now: 0, leader: true, control: { mode: 'standalone', instance: { id: 'l', label: 'l' }, leader: null, notActing: null, etcd: null }, appliedRevision: null, rejected: null,
        lastSyncOk: null, lastSyncError: null, lastStatusWriteOk: null, stateError: null,
        nodes: new Map([['cpu-01', { reachable, error: null, obs, lookedAt: 0, installFailures: {} }]]),
        health: healthByModel(stateFor(spec)), desired: { alpha: 2 }, unplaceable: {}, replicas: fromV2({ starts }).replicas, stopProgress: new Map(), memory: {}, lastPass: null,
      }).models.find((x) => x.name === 'alpha')!;
    const start = { model: 'alpha', node: 'cpu-01', digest: spec.models.alpha!.digest, startedAt: 10 };
    const table: [string, V2['starts'], [string, string][]][] = [
      ['still starting', { 'alpha-a': start }, [['starting', '']]],
      ['ready, endpoint known: served now', { 'alpha-a': { ...start, readyAt: 20, endpoint: 'http://10.0.0.1:20001' } }, [['ready', 'http://10.0.0.1:20001']]],
      ['ready, no endpoint recorded (a record from before it was kept): starting until a look', { 'alpha-a': { ...start, readyAt: 20 } }, [['starting', '']]],
    ];
    for (const [what, starts, want] of table) {
      const m = snapOf(starts);
      assert.deepEqual(m.replicas.map((r) => [r.phase, r.endpoint]), want, what);
      assert.deepEqual(readyReplicasOf(m).map((r) => r.id), want[0]![0] === 'ready' ? ['alpha-a'] : [], what);
    }
    // its node out of reach: starting, as an observed ready replica there is
    assert.deepEqual(snapOf({ 'alpha-a': { ...start, readyAt: 20, endpoint: 'http://10.0.0.1:20001' } }, false).replicas.map((r) => r.phase), ['starting']);
    // the start's outcome brings them: where the replica answers and when the node launched it (as a look shows it)
    const launched: ControllerState = fromV2({ starts: { 'alpha-a': start } });
    const concluded = asV2(startConcluded(launched, 'alpha-a', { kind: 'ready', endpoint: 'http://10.0.0.1:20001', startedAt: 15_000 }, 20, spec.settings).state).starts['alpha-a']!;
    assert.deepEqual([concluded.readyAt, concluded.endpoint, concluded.startedAt], [20, 'http://10.0.0.1:20001', 15_000]);
    // the endpoint survives a restart of the controller with the record
    const rt = stateFromJson(JSON.parse(JSON.stringify(fromV2({ starts: { 'alpha-a': { ...start, readyAt: 20, endpoint: 'http://10.0.0.1:20001' } } }))));
    assert.equal(asV2(rt).starts['alpha-a']!.endpoint, 'http://10.0.0.1:20001');
  });
});
