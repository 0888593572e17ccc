/**
 * The scaling decision (scale/decide.ts), on a fake clock: up by as many as the load needs once it
 * held for up_after, down one at a time once below for down_after, hysteresis (a band, and windows that
 * a break resets), clamping to the range (and a range that moves), a router gone silent counting as
 * zero after the TTL, a restart mid-window continuing from the record; and how a pass keeps it
 * (reconciler/scale-life.ts) and the planner reads it.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { SCALE_DEFAULTS, type ScaleSpec } from '../../src/fleet-spec/types.js';
import { DOWN_BAND, LOAD_TTL_MS, decideScale, loadOf, withLook, type ModelLoad, type ReplicaRange, type ScaleRecord } from '../../src/scale/decide.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { scaled, scaledCounts } from '../../src/reconciler/scale-life.js';
import { desiredNow } from '../../src/reconciler/planner.js';
import { clockStepped, demanded, type ControllerState } from '../../src/reconciler/state.js';
import { specOf, stateFor } from '../harness/reconciler-core.js';

const S = 1000;
const M = 60 * S;
const scale: ScaleSpec = { target: 0.8, upAfterMs: 10 * S, downAfterMs: 5 * M };
const T0 = 1_700_000_000_000;

interface Step {
  /** Seconds after T0. */
  readonly at: number;
  readonly load: ModelLoad;
  /** The count after this step. */
  readonly count: number;
}

/** Runs the decision through the steps, the record carried from one to the next; returns the changes. */
function run(steps: readonly Step[], o: { range?: ReplicaRange; slots?: number; record?: ScaleRecord; spec?: ScaleSpec } = {}): string[] {
  let record = o.record;
  const changes: string[] = [];
  for (const s of steps) {
    const d = decideScale({ range: o.range ?? { min: 1, max: 3 }, slots: o.slots ?? 1, scale: o.spec ?? scale, load: s.load, record, now: T0 + s.at * S });
    record = withLook(d);
    assert.equal(record.count, s.count, `count after ${s.at} s (load ${s.load.busy}+${s.load.queued})`);
    if (d.change) changes.push(`${s.at}s ${d.change.direction} ${d.change.from}→${d.change.to}`);
  }
  return changes;
}

const load = (busy: number, queued = 0): ModelLoad => ({ busy, queued });

describe('the scaling decision', () => {
  it('up: 6 requests on 1 slot wait up_after, then as many replicas as they need at once, clamped to max', () => {
    const changes = run([
      { at: 0, load: load(1, 5), count: 1 },
      { at: 5, load: load(1, 5), count: 1 },
      { at: 9.999, load: load(1, 5), count: 1 },
      { at: 10, load: load(1, 5), count: 3 },
      { at: 15, load: load(3, 3), count: 3 },
    ]);
    assert.deepEqual(changes, ['10s up 1→3']);
  });

  it('up by as many as needed: 10 requests at 4 slots × 80 % want 4 (from 1, in one step)', () => {
    assert.deepEqual(run([{ at: 0, load: load(4, 6), count: 1 }, { at: 10, load: load(4, 6), count: 4 }], { range: { min: 1, max: 8 }, slots: 4 }), ['10s up 1→4']);
  });

  it('the change says its numbers', () => {
    const first = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: undefined, now: T0 });
    const d = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: withLook(first), now: T0 + 10 * S });
    assert.equal(d.change?.why, '1 busy and 5 waiting on 1 slot for 10 s (target 80 % busy)');
    assert.equal(d.record.last?.to, 3);
  });

  it('a load that drops inside the window resets it: the window begins again at the next rise', () => {
    const changes = run([
      { at: 0, load: load(1, 2), count: 1 },
      { at: 8, load: load(0), count: 1 },
      { at: 9, load: load(1, 2), count: 1 },
      { at: 18, load: load(1, 2), count: 1 },
      { at: 19, load: load(1, 2), count: 3 },
    ]);
    assert.deepEqual(changes, ['19s up 1→3']);
  });

  it('down: one replica at a time, each after a whole down_after below', () => {
    const changes = run(
      [
        { at: 0, load: load(0), count: 3 },
        { at: 299, load: load(0), count: 3 },
        { at: 300, load: load(0), count: 2 },
        { at: 599, load: load(0), count: 2 },
        { at: 600, load: load(0), count: 1 },
        { at: 1200, load: load(0), count: 1 },
      ],
      { record: { count: 3 } },
    );
    assert.deepEqual(changes, ['300s down 3→2', '600s down 2→1']);
  });

  it('the down message says how busy it was and for how long', () => {
    const first = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(0), record: { count: 3 }, now: T0 });
    const d = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(0), record: withLook(first), now: T0 + 5 * M });
    assert.equal(d.change?.why, '0 % busy (0 of 3 slots) for 5 m (target 80 %)');
  });

  it(`hysteresis: a load that fits in one replica fewer at the target but not at ${DOWN_BAND} of it keeps the count`, () => {
    // 3 replicas × 4 slots: 6 requests fit 2 at 80 % (6 ≤ 6.4) but not at 72 % (6 > 5.76): no window
    assert.deepEqual(run([{ at: 0, load: load(6), count: 3 }, { at: 600, load: load(6), count: 3 }, { at: 1200, load: load(6), count: 3 }], { range: { min: 1, max: 4 }, slots: 4, record: { count: 3 } }), []);
    // 5 requests fit 2 at 72 %: down after down_after
    assert.deepEqual(run([{ at: 0, load: load(5), count: 3 }, { at: 300, load: load(5), count: 2 }], { range: { min: 1, max: 4 }, slots: 4, record: { count: 3 } }), ['300s down 3→2']);
  });

  it('hysteresis: 20 s on, 20 s off under down_after 60 s never scales in (passes every 5 s for 10 minutes)', () => {
    const steps: Step[] = [];
    for (let t = 0; t <= 600; t += 5) steps.push({ at: t, load: Math.floor(t / 20) % 2 === 0 ? load(1, 3) : load(0), count: t < 10 ? 1 : 3 });
    const changes = run(steps, { spec: { ...scale, downAfterMs: 60 * S } });
    assert.deepEqual(changes, ['10s up 1→3'], 'one scale-out, no scale-in, nothing started and stopped within a minute');
  });

  it('clamping: what the load wants stays within the range; a range that moves clamps the count at once', () => {
    assert.deepEqual(run([{ at: 0, load: load(50, 50), count: 2 }, { at: 10, load: load(50, 50), count: 5 }], { range: { min: 2, max: 5 } }), ['10s up 2→5']);
    // the range went down to 1..2 (a schedule entry): 3 → 2 without a window, and not as a scaling
    const d = decideScale({ range: { min: 1, max: 2 }, slots: 1, scale, load: load(3), record: { count: 3 }, now: T0 });
    assert.equal(d.record.count, 2);
    assert.equal(d.change, null);
    // and up to 4..6: the count is the new min at once
    assert.equal(decideScale({ range: { min: 4, max: 6 }, slots: 1, scale, load: load(0), record: { count: 2 }, now: T0 }).record.count, 4);
    // a model whose slots are unknown keeps its min
    assert.equal(decideScale({ range: { min: 1, max: 6 }, slots: Infinity, scale, load: load(99), record: undefined, now: T0 + 60 * S }).record.count, 1);
  });

  it('a silent router counts as zero after the TTL, never as its last figures', () => {
    const fresh = { router: 'a', at: T0, models: { m: load(1, 0) } };
    const silent = { router: 'b', at: T0 - LOAD_TTL_MS - 1, models: { m: load(5, 10) } };
    assert.deepEqual(loadOf([fresh, silent], 'm', T0), { busy: 1, queued: 0, waitMs: 0, routers: 1, silent: 1 });
    // both fresh: the leader sums them
    assert.deepEqual(loadOf([fresh, { ...silent, at: T0 - 1000 }], 'm', T0), { busy: 6, queued: 10, waitMs: 0, routers: 2, silent: 0 });
    // a router reported 6 waiting, then went silent: the window it opened closes once its report is too old
    const reports = [{ router: 'b', at: T0, models: { m: load(1, 5) } }];
    let rec: ScaleRecord | undefined;
    for (const t of [0, 5, 31, 45]) {
      const d = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: loadOf(reports, 'm', T0 + t * S), record: rec, now: T0 + t * S });
      rec = withLook(d);
    }
    assert.equal(rec!.count, 1);
    assert.equal(rec!.upSince, undefined);
  });

  it('a restart mid-window continues it from the record (and keeps the count), never from an empty window', () => {
    const first = withLook(decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: undefined, now: T0 }));
    const spec = { version: 3, appliedRevision: null, handledRetries: [], models: { m: { health: { digest: 'd' }, scale: first } }, replicas: {} };
    const back = stateFromJson(JSON.parse(JSON.stringify(spec))).models.m!.scale;
    assert.deepEqual(back, first);
    // 7 s after the restart, 10 s after the window began: the change comes now, not 10 s from now
    const d = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: back, now: T0 + 10 * S });
    assert.equal(d.record.count, 3);
    // a count of 3 read back stays 3 with no load until a whole down_after passed
    const kept = stateFromJson(JSON.parse(JSON.stringify({ ...spec, models: { m: { health: { digest: 'd' }, scale: { count: 3 } } } }))).models.m!.scale;
    assert.equal(decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(0), record: kept, now: T0 }).record.count, 3);
    // what is not a scale entry is dropped (the model starts from its min), not a crash
    assert.equal(stateFromJson({ ...spec, models: { m: { health: { digest: 'd' }, scale: { count: -1 } } } }).models.m!.scale, undefined);
  });

  it('next look: at a window\'s end or a sample before it; every few seconds while a load could still grow; less often above the min; none when idle at min', () => {
    const opened = decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: undefined, now: T0 });
    // a sample inside the up window (5 s), so a load that fell back in between resets it
    assert.equal(opened.nextAt, T0 + 5 * S);
    assert.equal(decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(1, 5), record: withLook(opened), now: T0 + 5 * S }).nextAt, T0 + 10 * S);
    assert.equal(decideScale({ range: { min: 1, max: 3 }, slots: 4, scale, load: load(1), record: undefined, now: T0 }).nextAt, T0 + 5 * S);
    assert.equal(decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(0), record: undefined, now: T0 }).nextAt, null);
    // at its max, under load that keeps it there: a look every tenth of down_after (30 s here), for when the load falls
    assert.equal(decideScale({ range: { min: 1, max: 3 }, slots: 1, scale, load: load(3), record: { count: 3 }, now: T0 }).nextAt, T0 + 30 * S);
  });
});

describe('a pass keeps the decision (scale-life.ts) and the planner reads it', async () => {
  const spec = await specOf((f) => {
    f['fleet.yaml'] += 'scale: { up_after: 10s, down_after: 1m }\n';
    f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: { min: 1, max: 4 }') + 'scale: { target: 100% }\n';
    f['models/beta.yaml'] = f['models/beta.yaml']!.replace('on_demand: { idle_timeout: 10m }', 'on_demand: { idle_timeout: 10m, max_replicas: 3 }');
  });

  it('the model file\'s fields over fleet.yaml\'s over the defaults', () => {
    assert.deepEqual(spec.models.alpha!.scale, { target: 1, upAfterMs: 10_000, downAfterMs: 60_000 });
    assert.deepEqual(spec.models.beta!.scale, { target: 0.8, upAfterMs: 10_000, downAfterMs: 60_000 });
    assert.deepEqual(spec.models.gamma!.scale, { ...SCALE_DEFAULTS, upAfterMs: 10_000, downAfterMs: 60_000 });
    assert.deepEqual(spec.models.alpha!.scaling, { mode: 'replicas', replicas: 1, max: 4 });
  });

  it('scales a replicas {min, max} model and an active on-demand one; an idle on-demand one keeps no count', () => {
    let s: ControllerState = demanded(stateFor(spec), 'beta', T0);
    const reports = [{ router: 'r', at: T0, models: { alpha: load(2, 4), beta: load(1, 5) } }];
    let r = scaled(s, spec, reports, T0);
    assert.deepEqual(r.notes, []);
    r = scaled(r.state, spec, reports.map((x) => ({ ...x, at: T0 + 10 * S })), T0 + 10 * S);
    s = r.state;
    // alpha: 6 on 2 slots at 100 % → 3; beta: 6 on 2 slots at 80 % → 4, clamped to 3
    assert.deepEqual(scaledCounts(s), { alpha: 3, beta: 3 });
    assert.deepEqual(r.notes.map((n) => n.msg), ['scaled alpha 1 → 3: 2 busy and 4 waiting on 2 slots for 10 s (target 100 % busy)', 'scaled beta 1 → 3: 1 busy and 5 waiting on 2 slots for 10 s (target 80 % busy)']);
    assert.equal(desiredNow(spec.models.alpha!, undefined, T0 + 10 * S, 3), 3);
    assert.equal(desiredNow(spec.models.beta!, { lastRequestAt: T0 }, T0 + 10 * S, 3), 3);
    // beta idle past its timeout: 0, and its count goes (asked for again, it starts from 1)
    const later = T0 + 11 * M;
    assert.equal(desiredNow(spec.models.beta!, { lastRequestAt: T0 }, later, 3), 0);
    const idle = scaled(s, spec, [], later).state;
    assert.equal(idle.models.beta!.scale, undefined);
    // a fixed model never has a count; gamma's desired is its replicas
    assert.equal(idle.models.gamma!.scale, undefined);
    assert.equal(desiredNow(spec.models.gamma!, undefined, later), 1);
  });

  it('a step of the wall clock moves the windows with it (the last change is history)', () => {
    const s = scaled(stateFor(spec), spec, [{ router: 'r', at: T0, models: { alpha: load(2, 4) } }], T0).state;
    const stepped = clockStepped(s, 3600_000);
    assert.equal(stepped.models.alpha!.scale!.upSince, T0 + 3600_000);
    assert.equal(stepped.models.alpha!.scale!.lookAt, T0 + 5 * S + 3600_000);
  });
});

describe('the range in force (scale/range.ts)', async () => {
  const { rangeNow, scales } = await import('../../src/scale/range.js');
  const spec = await specOf((f) => {
    f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'replicas: { min: 1, max: 4 }') + ['timezone: UTC', 'schedule:', '  - { cron: "0 8 * * *", min: 2 }', '  - { cron: "0 20 * * *", replicas: 1 }', '  - { cron: "0 22 * * *", max: 2 }', ''].join('\n');
  });
  const day = Date.parse('2026-03-02T00:00:00Z');
  const h = (n: number): number => day + n * 3600_000;

  it('a schedule entry sets the range from its firing on: min only (max the model\'s), a count (min = max), max only (min the model\'s)', () => {
    const alpha = spec.models.alpha!;
    assert.ok(scales(alpha));
    assert.deepEqual(rangeNow(alpha, h(9)), { min: 2, max: 4 });
    assert.deepEqual(rangeNow(alpha, h(21)), { min: 1, max: 1 });
    assert.deepEqual(rangeNow(alpha, h(23)), { min: 1, max: 2 });
    // a count decided at 4 in the morning's range is clamped by the evening's
    assert.equal(desiredNow(alpha, undefined, h(9), 4), 4);
    assert.equal(desiredNow(alpha, undefined, h(21), 4), 1);
    assert.equal(desiredNow(alpha, undefined, h(23), 4), 2);
  });

  it('on demand: 1..max_replicas while active; a fixed count does not scale', () => {
    assert.deepEqual(rangeNow(spec.models.beta!, day), { min: 1, max: 1 });
    assert.ok(!scales(spec.models.beta!));
    assert.ok(!scales(spec.models.gamma!));
  });
});
