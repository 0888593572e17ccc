/**
 * A canary's steps in the controller (#34): at every pass, each rollout in its canary phase is judged
 * on both arms' figures over the step's window (the routers' figures, rollout/types.ts
 * RolloutFigures), and moves as rollout/outcome.ts says: a failure rolls back at once; at the
 * interval's end a pass moves to the next step or promotes, and an inconclusive step holds or rolls
 * back. The transition itself is pure (`stepJudged`); this shell keeps what only this process can
 * know: which steps' windows it began itself.
 *
 * Figures live in the routers' memory, never in the record. A step whose window this controller did
 * not begin (it restarted, or took over as HA leader mid-step) cannot know its figures are whole, so
 * the window begins again from now, at the same step: a revision is never passed on figures it did
 * not earn, and a step never ends early on a partial window.
 */
import type { Logger } from 'pino';
import type { FleetSpec } from '../fleet-spec/types.js';
import { stepOutcome, shareWords, type StepOutcome } from '../rollout/outcome.js';
import type { CanarySpec, CanaryWindow, RolloutFigures, RolloutView, StepVerdict } from '../rollout/types.js';
import { describeFigures, judgeStep } from '../rollout/verdict.js';
import { emptyWindow } from '../rollout/window.js';
import type { Note } from './note.js';
import { stableLeft, stepConcluded, windowRestarted, type RolloutRecord } from './rollout-life.js';
import type { ControllerState, ModelRecord } from './state.js';

/** A step's judgement (pure): the verdict over the window, where it leads, and what to log. */
export interface StepJudged {
  readonly rollout: RolloutRecord | undefined;
  readonly verdict: StepVerdict;
  readonly outcome: StepOutcome;
  readonly note: Note | null;
}

/** Judges a canary step: `window` null (no figures kept for the revision) is an empty window from the step's start. */
export function stepJudged(model: string, r: RolloutRecord, canary: CanarySpec, window: CanaryWindow | null, now: number): StepJudged {
  const step = r.step ?? 0;
  const verdict = judgeStep(canary, window ?? { since: r.since, stable: emptyWindow(), canary: emptyWindow() });
  const outcome = stepOutcome(canary, step, verdict, now >= r.since + canary.intervalMs);
  const rollout = stepConcluded(r, outcome, now);
  const fields = { model, digest: r.digest, step, share: shareWords(canary.steps[step] ?? 1), figures: describeFigures(canary, verdict) };
  const note: Note | null =
    outcome.kind === 'next'
      ? { level: 'info', msg: `rollout: the canary passed at ${fields.share}; next step ${shareWords(canary.steps[outcome.step] ?? 1)}`, fields }
      : outcome.kind === 'promote'
        ? { level: 'info', msg: 'rollout: the canary passed its last step; the new revision is promoted', fields }
        : outcome.kind === 'rollback'
          ? { level: 'error', msg: 'rollout rolled back: the stable revision serves', fields: { ...fields, code: outcome.reason.code, reason: outcome.reason.message } }
          : outcome.kind === 'hold'
            ? { level: 'warn', msg: 'rollout held: the step was inconclusive; an operator decides', fields: { ...fields, code: outcome.reason.code, reason: outcome.reason.message } }
            : null;
  return { rollout, verdict, outcome, note };
}

/** When the next pass is due for a canary step: at each quarter of its interval (a failure rolls back early), and at its end. */
export function canaryDue(state: ControllerState, spec: FleetSpec, now: number): number | null {
  let at: number | null = null;
  for (const name in state.models) {
    const r = state.models[name]!.rollout;
    const canary = spec.models[name]?.rollout?.canary;
    if (r?.phase !== 'canary' || !canary) continue;
    for (let q = 1; q <= 4; q++) {
      const t = r.since + (canary.intervalMs * q) / 4;
      if (t > now && (at === null || t < at)) at = Math.ceil(t);
    }
  }
  return at;
}

const keyOf = (model: string, digest: string, since: number): string => `${model}@${digest}@${since}`;

export class CanarySteps {
  /** The steps' windows this process began ("model@digest@since"). */
  private readonly begun = new Set<string>();
  /** Each canary model's live figures as last judged (for the snapshot). */
  private readonly live = new Map<string, NonNullable<RolloutView['figures']>>();
  /** Models told of having no stable replica left (said once until one is back). */
  private readonly stableGone = new Set<string>();

  constructor(private readonly figures: RolloutFigures | null) {}

  /** A step's window begins (checks passed, a step passed): the routers' figures for it start empty. */
  begin(model: string, digest: string, since: number): void {
    this.begun.add(keyOf(model, digest, since));
    this.live.delete(model);
    this.figures?.restart(model, digest, since);
  }

  /**
   * Says once (an error) when a rollout before promotion has no replica of the stable revision left:
   * this controller cannot start it again (only the new definition is in the repo's head), so the
   * model serves on the new revision's replica or not at all until an operator decides.
   */
  private watchStable(model: string, r: RolloutRecord | undefined, state: ControllerState, log: Logger): void {
    const gone = r !== undefined && r.phase !== 'promoted' && !stableLeft(state.replicas, model, r.stable);
    if (!gone) return void this.stableGone.delete(model);
    if (this.stableGone.has(model)) return;
    this.stableGone.add(model);
    log.error({ model, stable: r.stable, digest: r.digest, phase: r.phase }, 'rollout: no replica of the stable revision is left, and this controller cannot start it again: promote the new revision (llmgw ctl rollout promote) or revert the definition in git');
  }

  /** The live figures of a model's canary step, or undefined. */
  figuresOf(model: string): RolloutView['figures'] {
    return this.live.get(model);
  }

  /** Judges every canary step of the record (a pass, before it plans): the record after, and what to log. */
  judge(state: ControllerState, spec: FleetSpec, now: number, log: Logger): ControllerState {
    let out = state;
    const models: Record<string, ModelRecord> = {};
    let changed = false;
    for (const name in state.models) {
      const m = state.models[name]!;
      const r = m.rollout;
      this.watchStable(name, r, state, log);
      const canary = spec.models[name]?.rollout?.canary ?? null;
      if (r?.phase !== 'canary' || canary === null || spec.models[name]!.digest !== r.digest) continue;
      let next: RolloutRecord | undefined;
      if (!this.begun.has(keyOf(name, r.digest, r.since))) {
        next = windowRestarted(r, now);
        this.begin(name, r.digest, now);
        log.warn({ model: name, digest: r.digest, step: r.step ?? 0 }, 'rollout: the canary step\'s window begins again (its figures were not kept across a restart or a change of leader)');
      } else {
        const j = stepJudged(name, r, canary, this.figures?.window(name, r.digest) ?? null, now);
        this.live.set(name, { stable: j.verdict.stable, canary: j.verdict.canary, verdict: j.verdict.kind });
        if (j.note) log[j.note.level](j.note.fields, j.note.msg);
        next = j.rollout;
        if (next?.phase === 'canary' && next.since !== r.since) this.begin(name, next.digest, next.since);
        else if (next?.phase !== 'canary') this.live.delete(name);
      }
      if (next === r) continue;
      changed = true;
      const { rollout: _was, ...rest } = m;
      models[name] = next ? { ...rest, rollout: next } : rest;
    }
    if (changed) out = { ...state, models: { ...state.models, ...models } };
    for (const name of [...this.live.keys()]) if (out.models[name]?.rollout?.phase !== 'canary') this.live.delete(name);
    return out;
  }
}
