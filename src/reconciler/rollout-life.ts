/**
 * A model's rollout in the state record (pure, #34): a revision proves itself before it takes the
 * model's traffic. Only a model whose definition changes while it serves, and whose spec carries
 * `rollout:` checks, has one; without one a definition change is the surge rollout of before.
 *
 *   (none) ─definition changes─▶ checking ─checks pass─▶ promoted ─no stable replica left─▶ (none)
 *                                   │   ▲
 *                       checks fail ▼   │ retry (ctl retry, Llmgw-Retry:)
 *                                  held ─┘
 *
 * - checking: one replica of the new revision starts beside the stable ones (where there is no room
 *   for both, one stable replica drains first: the model never drops below replicas − 1). It takes
 *   no user request until its checks pass;
 * - held: a check failed (`verdict` says which, what it expected and what came back). The new
 *   replica drains and stops, the stable revision keeps serving, and it stays held until the
 *   definition changes again or a retry is handled — as parking does;
 * - promoted: the checks passed; the stable replicas are replaced surge-first, one at a time, as
 *   any definition change is.
 * A second push during a rollout replaces the revision under test (never a third beside them); a
 * push back to the stable revision ends the rollout.
 */
import type { ReasonRef } from '../errors/catalogue.js';
import type { Note } from './note.js';
import type { ReplicaRecord } from './replica-life.js';
import type { ModelRecord } from './state.js';

export type RolloutPhase = 'checking' | 'held' | 'promoted';

export interface RolloutRecord {
  /** The revision (definition digest) being rolled out. */
  readonly digest: string;
  /** The revision that serves until it is promoted. */
  readonly stable: string;
  readonly phase: RolloutPhase;
  /** Epoch ms the phase began. */
  readonly since: number;
  /** Held: why (the check, what it expected, what came back). */
  readonly verdict?: ReasonRef;
}

export const ROLLOUT_EDGES: Readonly<Record<RolloutPhase | 'none', readonly (RolloutPhase | 'none')[]>> = {
  none: ['checking'],
  checking: ['held', 'promoted', 'checking', 'none'],
  held: ['checking', 'none'],
  promoted: ['checking', 'none'],
};

/** What the planner is told of a rollout: the stable revision it keeps, and how many replicas of the new one it wants. */
export interface PlannedRollout {
  readonly stable: string;
  readonly want: number;
}

export function plannedRollout(r: RolloutRecord | undefined): PlannedRollout | null {
  if (r === undefined || r.phase === 'promoted') return null;
  return { stable: r.stable, want: r.phase === 'checking' ? 1 : 0 };
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
): { rollout: RolloutRecord | undefined; note: Note | null } {
  const was = m?.rollout;
  if (!checks) return { rollout: undefined, note: was ? { level: 'info', msg: 'rollout ended: the model has no rollout checks any more', fields: { model: name } } : null };
  if (was && was.phase !== 'promoted' && digest === was.stable) return { rollout: undefined, note: { level: 'info', msg: 'rollout ended: the definition is back at the stable revision', fields: { model: name, digest } } };
  const stable = was && was.phase !== 'promoted' ? was.stable : m?.health.digest;
  if (stable === undefined || stable === digest || !servesOn(replicas, name, stable)) return { rollout: undefined, note: null };
  return {
    rollout: { digest, stable, phase: 'checking', since: now },
    note: { level: 'info', msg: was && was.phase !== 'promoted' ? 'rollout: a newer revision replaces the one under test' : 'rollout: the new revision runs its checks before it takes traffic', fields: { model: name, digest, stable } },
  };
}

/** The checks of `digest` concluded. A result for another revision than the one under test changes nothing. */
export function checksConcluded(r: RolloutRecord | undefined, digest: string, failed: ReasonRef | null, now: number): RolloutRecord | undefined {
  if (r === undefined || r.phase !== 'checking' || r.digest !== digest) return r;
  return failed ? { ...r, phase: 'held', since: now, verdict: failed } : { digest: r.digest, stable: r.stable, phase: 'promoted', since: now };
}

/** A retry of a held rollout runs its checks again. */
export function rolloutRetried(r: RolloutRecord | undefined, now: number): RolloutRecord | undefined {
  return r?.phase === 'held' ? { digest: r.digest, stable: r.stable, phase: 'checking', since: now } : r;
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
