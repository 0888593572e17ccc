/**
 * A canary's steps in the controller (#34), pure: a step judged on both arms' window (stepJudged),
 * when a pass is due (canaryDue), and the shell's one memory — which windows it began — driven with
 * a fake figures port (CanarySteps).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { CanarySteps, canaryDue, stepJudged } from '../../src/reconciler/canary-steps.js';
import { stableLeft, type RolloutRecord } from '../../src/reconciler/rollout-life.js';
import { rolloutView } from '../../src/reconciler/summarize.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import type { ArmSample, ArmWindow, CanarySpec, CanaryWindow, RolloutFigures } from '../../src/rollout/types.js';
import { emptyWindow, recorded } from '../../src/rollout/window.js';

const CANARY: CanarySpec = { steps: [0.1, 0.5], intervalMs: 60_000, minRequests: 10, maxErrorRateIncrease: 0.02, maxTtftRatio: 1.5, maxTpotRatio: 1.5, onInconclusive: 'hold' };
const T0 = 1_000_000;
const AT_STEP_0: RolloutRecord = { digest: 'd2', stable: 'd1', phase: 'canary', since: T0, step: 0 };

function arm(n: number, o: { errors?: number; ttftMs?: number; tpotMs?: number } = {}): ArmWindow {
  let w = emptyWindow();
  for (let i = 0; i < n; i++) {
    const error = i < (o.errors ?? 0);
    const s: ArmSample = error
      ? { arm: 'stable', outcome: 'error', ttftMs: null, tpotMs: null, promptTokens: null, cachedTokens: null, laterTurn: false }
      : { arm: 'stable', outcome: 'ok', ttftMs: o.ttftMs ?? 100, tpotMs: o.tpotMs ?? 20, promptTokens: 40, cachedTokens: 0, laterTurn: false };
    w = recorded(w, s);
  }
  return w;
}
const windowOf = (stable: ArmWindow, canary: ArmWindow, since = T0): CanaryWindow => ({ since, stable, canary });

describe('a canary step judged (stepJudged)', () => {
  const good = windowOf(arm(40), arm(12));
  const bad = windowOf(arm(40), arm(12, { errors: 4 }));
  const thin = windowOf(arm(40), arm(6));
  const cases: { name: string; r: RolloutRecord; w: CanaryWindow | null; now: number; spec?: CanarySpec; want: Partial<RolloutRecord> | 'same'; outcome: string; reason?: RegExp }[] = [
    { name: 'a pass before the interval ends waits', r: AT_STEP_0, w: good, now: T0 + 30_000, want: 'same', outcome: 'wait' },
    { name: 'a pass at the interval\'s end moves to the next step, its window from now', r: AT_STEP_0, w: good, now: T0 + 60_000, want: { phase: 'canary', step: 1, since: T0 + 60_000 }, outcome: 'next' },
    { name: 'a pass at the last step promotes', r: { ...AT_STEP_0, step: 1 }, w: good, now: T0 + 61_000, want: { phase: 'promoted', since: T0 + 61_000 }, outcome: 'promote' },
    { name: 'a failure rolls back at once, mid-interval, with both arms\' error rates', r: AT_STEP_0, w: bad, now: T0 + 10_000, want: { phase: 'rolled_back', step: 0 }, outcome: 'rollback', reason: /canary rolled back at 10%: error rate 33% vs 0% on the stable revision over 12 \/ 40 requests/ },
    { name: 'too few requests mid-interval waits', r: AT_STEP_0, w: thin, now: T0 + 59_999, want: 'same', outcome: 'wait' },
    { name: 'too few requests at the end holds, saying how many', r: AT_STEP_0, w: thin, now: T0 + 60_000, want: { phase: 'held', step: 0 }, outcome: 'hold', reason: /held at 10%: 6 of 10 requests on the canary/ },
    { name: 'on_inconclusive: rollback rolls back instead', r: AT_STEP_0, w: thin, now: T0 + 60_000, spec: { ...CANARY, onInconclusive: 'rollback' }, want: { phase: 'rolled_back' }, outcome: 'rollback', reason: /on_inconclusive: rollback/ },
    { name: 'no figures at all is an empty window: inconclusive at the end', r: AT_STEP_0, w: null, now: T0 + 60_000, want: { phase: 'held' }, outcome: 'hold', reason: /0 of 10 requests on the canary/ },
    { name: 'a TTFT regression rolls back with both figures', r: AT_STEP_0, w: windowOf(arm(40, { ttftMs: 100 }), arm(20, { ttftMs: 400 })), now: T0 + 1000, want: { phase: 'rolled_back' }, outcome: 'rollback', reason: /TTFT p95 .*× the stable revision's/ },
    { name: 'a TPOT regression rolls back with both figures', r: AT_STEP_0, w: windowOf(arm(40, { tpotMs: 20 }), arm(20, { tpotMs: 80 })), now: T0 + 1000, want: { phase: 'rolled_back' }, outcome: 'rollback', reason: /time per output token p95/ },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const j = stepJudged('m', c.r, c.spec ?? CANARY, c.w, c.now);
      assert.equal(j.outcome.kind, c.outcome);
      if (c.want === 'same') assert.equal(j.rollout, c.r);
      else for (const [k, v] of Object.entries(c.want)) assert.deepEqual((j.rollout as unknown as Record<string, unknown>)[k], v, k);
      if (c.reason) assert.match(j.rollout?.verdict?.message ?? '', c.reason);
      if (j.outcome.kind !== 'wait') assert.ok(j.note, 'a move is logged');
      else assert.equal(j.note, null);
    });
  }
});

const specWith = (canary: CanarySpec | null, digest = 'd2'): FleetSpec => ({ models: { m: { name: 'm', digest, rollout: canary ? { checks: [], canary } : null } } }) as unknown as FleetSpec;
const withRollout = (r: RolloutRecord): ControllerState => {
  const s = emptyState;
  return { ...s, models: { m: { health: { digest: r.digest } as never, rollout: r } } };
};

describe('when a pass is due for a canary (canaryDue)', () => {
  it('at each quarter of the step, then none once it ended', () => {
    const s = withRollout(AT_STEP_0);
    assert.equal(canaryDue(s, specWith(CANARY), T0), T0 + 15_000);
    assert.equal(canaryDue(s, specWith(CANARY), T0 + 15_000), T0 + 30_000);
    assert.equal(canaryDue(s, specWith(CANARY), T0 + 59_000), T0 + 60_000);
    assert.equal(canaryDue(s, specWith(CANARY), T0 + 60_000), null);
    assert.equal(canaryDue(withRollout({ ...AT_STEP_0, phase: 'held' }), specWith(CANARY), T0), null);
    assert.equal(canaryDue(s, specWith(null), T0), null);
  });
});

class FakeFigures implements RolloutFigures {
  windows = new Map<string, CanaryWindow>();
  restarts: [string, string, number][] = [];
  window(model: string, digest: string): CanaryWindow | null {
    return this.windows.get(`${model}@${digest}`) ?? null;
  }
  restart(model: string, digest: string, since: number): void {
    this.restarts.push([model, digest, since]);
    this.windows.set(`${model}@${digest}`, windowOf(emptyWindow(), emptyWindow(), since));
  }
  all(): Record<string, { canaryDigest: string; window: CanaryWindow }> {
    return {};
  }
}

describe('the shell: only windows it began are judged (CanarySteps)', () => {
  const log = pino({ level: 'silent' });

  it('a step it did not begin (a restart, a new leader) begins again from now, at the same step', () => {
    const figures = new FakeFigures();
    const steps = new CanarySteps(figures);
    const s = withRollout({ ...AT_STEP_0, step: 1 });
    const out = steps.judge(s, specWith(CANARY), T0 + 45_000, log);
    assert.deepEqual(out.models.m!.rollout, { ...AT_STEP_0, step: 1, since: T0 + 45_000 });
    assert.deepEqual(figures.restarts, [['m', 'd2', T0 + 45_000]]);
    // judged from then on: the next pass on the same record changes nothing before the interval ends
    figures.windows.set('m@d2', windowOf(arm(40), arm(12), T0 + 45_000));
    const again = steps.judge(out, specWith(CANARY), T0 + 50_000, log);
    assert.equal(again, out, 'running a pass twice on an unchanged world plans nothing');
    assert.equal(steps.figuresOf('m')?.verdict, 'pass');
    assert.equal(steps.figuresOf('m')?.canary.requests, 12);
  });

  it('a step it began is judged on the figures: a pass at the end moves on and begins the next window', () => {
    const figures = new FakeFigures();
    const steps = new CanarySteps(figures);
    steps.begin('m', 'd2', T0);
    figures.windows.set('m@d2', windowOf(arm(40), arm(12)));
    const out = steps.judge(withRollout(AT_STEP_0), specWith(CANARY), T0 + 60_000, log);
    assert.deepEqual(out.models.m!.rollout, { ...AT_STEP_0, step: 1, since: T0 + 60_000 });
    assert.deepEqual(figures.restarts.at(-1), ['m', 'd2', T0 + 60_000]);
    assert.equal(steps.figuresOf('m'), undefined, 'the new step has no figures yet');
  });

  it('a rollback leaves the canary phase and its live figures', () => {
    const figures = new FakeFigures();
    const steps = new CanarySteps(figures);
    steps.begin('m', 'd2', T0);
    figures.windows.set('m@d2', windowOf(arm(40), arm(12, { errors: 6 })));
    const out = steps.judge(withRollout(AT_STEP_0), specWith(CANARY), T0 + 5_000, log);
    assert.equal(out.models.m!.rollout?.phase, 'rolled_back');
    assert.equal(out.models.m!.rollout?.verdict?.code, 'ROLLOUT_ROLLED_BACK');
    assert.equal(steps.figuresOf('m'), undefined);
  });

  it('a spec whose digest moved on (a newer push) is not judged against the old revision', () => {
    const figures = new FakeFigures();
    const steps = new CanarySteps(figures);
    const s = withRollout(AT_STEP_0);
    assert.equal(steps.judge(s, specWith(CANARY, 'd3'), T0 + 60_000, log), s);
    assert.deepEqual(figures.restarts, []);
  });
});

describe('the record keeps a canary step across a restart', () => {
  it('phase, step and window start read back from JSON', () => {
    const s = withRollout({ ...AT_STEP_0, step: 1 });
    const back = { state: stateFromJson(JSON.parse(JSON.stringify(s))) };
    assert.deepEqual(back.state.models.m!.rollout, { ...AT_STEP_0, step: 1 });
    const rolled = withRollout({ ...AT_STEP_0, phase: 'rolled_back', verdict: { code: 'ROLLOUT_ROLLED_BACK', message: 'x' } });
    assert.deepEqual(stateFromJson(JSON.parse(JSON.stringify(rolled))).models.m!.rollout, rolled.models.m!.rollout);
  });
});

describe('a rollout with no replica of the stable revision left says so', () => {
  const ready = (digest: string) => ({ model: 'm', node: 'n1', digest, startedAt: 1, phase: { kind: 'ready' as const, since: 1, seen: true } });
  const stopping = (digest: string) => ({ ...ready(digest), phase: { kind: 'leaving' as const, why: 'stop' as const, since: 2, reason: 'replaced' as const, drain: true } });

  it('stableLeft: a stable replica that serves or will counts; one being stopped does not', () => {
    assert.equal(stableLeft({ a: ready('d1') }, 'm', 'd1'), true);
    assert.equal(stableLeft({ a: ready('d2') }, 'm', 'd1'), false);
    assert.equal(stableLeft({ a: stopping('d1') as never }, 'm', 'd1'), false);
  });

  it('the view and the log: once, an error, until a stable replica is back; a promoted rollout never', () => {
    const lines: { level: number; msg: string }[] = [];
    const log = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as { level: number; msg: string }) });
    const steps = new CanarySteps(new FakeFigures());
    const held: RolloutRecord = { ...AT_STEP_0, phase: 'held', verdict: { code: 'ROLLOUT_HELD', message: 'x' } };
    const gone = { ...withRollout(held), replicas: { c: ready('d2') } };
    steps.judge(gone, specWith(CANARY), T0, log);
    steps.judge(gone, specWith(CANARY), T0 + 1, log);
    assert.equal(lines.filter((l) => /no replica of the stable revision is left/.test(l.msg)).length, 1);
    assert.equal(lines[0]!.level, 50);
    steps.judge({ ...gone, replicas: { s: ready('d1') } }, specWith(CANARY), T0 + 2, log);
    steps.judge(gone, specWith(CANARY), T0 + 3, log);
    assert.equal(lines.filter((l) => /no replica of the stable revision is left/.test(l.msg)).length, 2, 'said again after one came back and went');
    assert.equal(rolloutView(held, CANARY, undefined, true).stableGone, true);
    assert.equal(rolloutView({ ...held, phase: 'promoted' }, CANARY, undefined, true).stableGone, undefined);
  });
});
