/**
 * A model's rollout in the state record (pure, #34): a revision proves itself before it takes the
 * model's traffic. Only a model whose definition changes while it serves, and whose spec carries a
 * `rollout:` block (checks, a canary or both), has one; without one a definition change is the
 * surge rollout of before.
 *
 *   (none) ─definition changes─▶ checking ─checks pass, a canary─▶ canary(step 0) ─pass─▶ canary(step k+1)
 *                                  │  ▲ │ checks pass, no canary      │ │ │ last step passes
 *                      checks fail ▼  │ └──────────────▶ promoted ◀───┘ │ │
 *                                 held│◀── inconclusive (hold) ─────────┘ │ fail, or inconclusive (rollback)
 *                                     │                                   ▼
 *                                     └────────── retry ────────── rolled_back
 *
 * - checking: one replica of the new revision starts beside the stable ones (where there is no room
 *   for both, one stable replica drains first: the model never drops below replicas − 1). It takes
 *   no user request until its checks pass (a spec with a canary and no checks passes at once);
 * - canary: the router sends step `step`'s share of the model's requests to the new revision's
 *   replica, and the controller judges both arms over the step's window (`since` → since + interval):
 *   a failure rolls back at once, a pass at the interval's end moves on (rollout/outcome.ts);
 * - held: a check failed, or a step was inconclusive and `on_inconclusive: hold`; rolled_back: a step
 *   failed, or was inconclusive with `on_inconclusive: rollback`, or an operator aborted it. Either
 *   way `verdict` says why; the new replica drains and stops, the stable revision keeps serving, and
 *   it stays so until the definition changes again or a retry (`ctl retry`, `Llmgw-Retry:`) runs
 *   the rollout again from its checks — as parking does. `ctl rollout promote` promotes it;
 * - until it is promoted, a stable replica that fails or is restarted is started again from the
 *   stable revision's definition (`stableRevision`, the fleet revision applied before the change);
 * - promoted: the stable replicas are replaced surge-first, one at a time, as any definition change is.
 * A second push during a rollout replaces the revision under test (never a third beside them); a
 * push back to the stable revision ends the rollout.
 */
import type { ReasonRef } from '../errors/catalogue.js';
import { abortedReason, type StepOutcome } from '../rollout/outcome.js';
import type { ModelSpec } from '../fleet-spec/types.js';
import type { CanarySpec } from '../rollout/types.js';
import type { Note } from './note.js';
import type { ReplicaRecord } from './replica-life.js';
import type { ModelRecord } from './state.js';

export type RolloutPhase = 'checking' | 'canary' | 'held' | 'rolled_back' | 'promoted';

export interface RolloutRecord {
  /** The revision (definition digest) being rolled out. */
  readonly digest: string;
  /** The revision that serves until it is promoted. */
  readonly stable: string;
  /**
   * The fleet repo revision whose spec defines `stable` (the one applied before the change): a
   * stable replica that fails or is restarted while the rollout is unpromoted is started again
   * from it. Absent in records written before it was kept: stable replicas are then only kept.
   */
  readonly stableRevision?: string;
  readonly phase: RolloutPhase;
  /** Epoch ms the phase began (canary: the step's window, which begins again when its figures were lost). */
  readonly since: number;
  /** Canary: the step (an index into the canary's steps). Held or rolled back from a step: that step. */
  readonly step?: number;
  /** Held or rolled back: why (the check, what it expected and what came back; both arms' figures). */
  readonly verdict?: ReasonRef;
}

export const ROLLOUT_EDGES: Readonly<Record<RolloutPhase | 'none', readonly (RolloutPhase | 'none')[]>> = {
  none: ['checking'],
  checking: ['canary', 'held', 'rolled_back', 'promoted', 'checking', 'none'],
  canary: ['canary', 'held', 'rolled_back', 'promoted', 'checking', 'none'],
  held: ['checking', 'promoted', 'rolled_back', 'none'],
  rolled_back: ['checking', 'promoted', 'none'],
  promoted: ['checking', 'none'],
};

/** Whether the revision under test takes no user request (its replicas are shown starting). */
export const keptFromUsers = (r: RolloutRecord | undefined, digest: string): boolean => r !== undefined && r.digest === digest && r.phase !== 'promoted' && r.phase !== 'canary';

/** What the planner is told of a rollout: the stable revision it keeps, and how many replicas of the new one it wants. */
export interface PlannedRollout {
  readonly stable: string;
  readonly want: number;
  /** The stable revision's definition (loaded from `stableRevision`): its replicas are started again when one is missing. */
  readonly stableModel?: ModelSpec;
}

/** `stableModel`: the model's definition at the record's stableRevision, when it is loaded (and is the stable digest). */
export function plannedRollout(r: RolloutRecord | undefined, stableModel?: ModelSpec): PlannedRollout | null {
  if (r === undefined || r.phase === 'promoted') return null;
  const want = r.phase === 'checking' || r.phase === 'canary' ? 1 : 0;
  return { stable: r.stable, want, ...(stableModel?.digest === r.stable ? { stableModel } : {}) };
}

/** Whether the model has a ready replica of this revision (one a rollout can be judged against). */
function servesOn(replicas: Readonly<Record<string, ReplicaRecord>>, model: string, digest: string): boolean {
  for (const id in replicas) {
    const r = replicas[id]!;
    if (r.model === model && r.digest === digest && r.phase.kind === 'ready') return true;
  }
  return false;
}

/**
 * The model's definition moved from `before` to `digest`: its rollout from now, or none. `checks`:
 * whether its spec carries rollout checks.
 */
export function rolloutOnDefinition(
  m: ModelRecord | undefined,
  name: string,
  digest: string,
  checks: boolean,
  replicas: Readonly<Record<string, ReplicaRecord>>,
  now: number,
  appliedBefore: string | null = null,
): { rollout: RolloutRecord | undefined; note: Note | null } {
  const was = m?.rollout;
  if (!checks) return { rollout: undefined, note: was ? { level: 'info', msg: 'rollout ended: the model has no rollout checks any more', fields: { model: name } } : null };
  if (was && was.phase !== 'promoted' && digest === was.stable) return { rollout: undefined, note: { level: 'info', msg: 'rollout ended: the definition is back at the stable revision', fields: { model: name, digest } } };
  const underway = was !== undefined && was.phase !== 'promoted';
  const stable = underway ? was.stable : m?.health.digest;
  if (stable === undefined || stable === digest || !servesOn(replicas, name, stable)) return { rollout: undefined, note: null };
  // the revision that defined the stable one: the rollout's own when one is under way, else the one applied before this change
  const stableRevision = underway ? was.stableRevision : (appliedBefore ?? undefined);
  return {
    rollout: { digest, stable, ...(stableRevision !== undefined ? { stableRevision } : {}), phase: 'checking', since: now },
    note: { level: 'info', msg: was && was.phase !== 'promoted' ? 'rollout: a newer revision replaces the one under test' : 'rollout: the new revision runs its checks before it takes traffic', fields: { model: name, digest, stable } },
  };
}

const base = (r: RolloutRecord): Pick<RolloutRecord, 'digest' | 'stable' | 'stableRevision'> => ({ digest: r.digest, stable: r.stable, ...(r.stableRevision !== undefined ? { stableRevision: r.stableRevision } : {}) });

/**
 * The checks of `digest` concluded: held on a failure; else the canary's first step (`canary` true:
 * the spec has one), or promoted. A result for another revision than the one under test changes nothing.
 */
export function checksConcluded(r: RolloutRecord | undefined, digest: string, failed: ReasonRef | null, now: number, canary = false): RolloutRecord | undefined {
  if (r === undefined || r.phase !== 'checking' || r.digest !== digest) return r;
  if (failed) return { ...r, phase: 'held', since: now, verdict: failed };
  return canary ? { ...base(r), phase: 'canary', since: now, step: 0 } : { ...base(r), phase: 'promoted', since: now };
}

/** A step's outcome (rollout/outcome.ts stepOutcome) applied to a canary. 'wait' and any other phase change nothing. */
export function stepConcluded(r: RolloutRecord | undefined, outcome: StepOutcome, now: number): RolloutRecord | undefined {
  if (r?.phase !== 'canary' || outcome.kind === 'wait') return r;
  const step = r.step ?? 0;
  switch (outcome.kind) {
    case 'next':
      return { ...base(r), phase: 'canary', since: now, step: outcome.step };
    case 'promote':
      return { ...base(r), phase: 'promoted', since: now };
    case 'rollback':
      return { ...base(r), phase: 'rolled_back', since: now, step, verdict: outcome.reason };
    case 'hold':
      return { ...base(r), phase: 'held', since: now, step, verdict: outcome.reason };
  }
}

/** The canary step's window began again at `now` (its figures were lost with a restart or a failover). */
export function windowRestarted(r: RolloutRecord | undefined, now: number): RolloutRecord | undefined {
  return r?.phase === 'canary' ? { ...r, since: now } : r;
}

/** A retry of a held or rolled-back rollout runs it again from its checks. */
export function rolloutRetried(r: RolloutRecord | undefined, now: number): RolloutRecord | undefined {
  return r?.phase === 'held' || r?.phase === 'rolled_back' ? { ...base(r), phase: 'checking', since: now } : r;
}

/** What an operator's `ctl rollout promote|abort` did, or why it did nothing. */
export type OverrideOutcome = 'promoted' | 'aborted' | 'no-rollout' | 'already';

/**
 * `llmgw ctl rollout promote MODEL`: the revision under test is promoted from any phase (its checks
 * or the rest of its canary skipped). `abort`: a rollout in its checks or canary is rolled back
 * (ROLLOUT_ABORTED, at the step's share); a held one is rolled back too; one rolled back already, or
 * promoted (its stable replicas may be gone), is left as it is. `canary`: the spec's, for the share.
 */
export function rolloutOverridden(r: RolloutRecord | undefined, how: 'promote' | 'abort', now: number, canary: CanarySpec | null, by?: string): { rollout: RolloutRecord | undefined; outcome: OverrideOutcome } {
  if (r === undefined) return { rollout: r, outcome: 'no-rollout' };
  if (how === 'promote') return r.phase === 'promoted' ? { rollout: r, outcome: 'already' } : { rollout: { ...base(r), phase: 'promoted', since: now }, outcome: 'promoted' };
  if (r.phase === 'promoted' || r.phase === 'rolled_back') return { rollout: r, outcome: 'already' };
  // the step it stands at (a canary's, or the one a held rollout was held at); none: it was in its checks
  const share = r.step !== undefined && canary ? (canary.steps[Math.min(r.step, canary.steps.length - 1)] ?? null) : null;
  return { rollout: { ...base(r), phase: 'rolled_back', since: now, ...(r.step !== undefined ? { step: r.step } : {}), verdict: abortedReason(share, by) }, outcome: 'aborted' };
}

/** Whether a replica of the stable revision is left that serves or will (not one being stopped). */
export function stableLeft(replicas: Readonly<Record<string, ReplicaRecord>>, model: string, stable: string): boolean {
  for (const id in replicas) {
    const x = replicas[id]!;
    if (x.model === model && x.digest === stable && !(x.phase.kind === 'leaving' && x.phase.why === 'stop')) return true;
  }
  return false;
}

/** A promoted rollout ends once no replica of the stable revision is left. */
export function rolloutSettled(r: RolloutRecord | undefined, model: string, replicas: Readonly<Record<string, ReplicaRecord>>): RolloutRecord | undefined {
  if (r?.phase !== 'promoted') return r;
  for (const id in replicas) {
    const x = replicas[id]!;
    if (x.model === model && x.digest === r.stable) return r;
  }
  return undefined;
}
