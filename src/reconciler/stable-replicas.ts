/**
 * The stable revision's replicas while a rollout is unpromoted (pure, #34). Every one of them is
 * kept. With the stable definition loaded (the rollout's `stableModel`, from the fleet revision that
 * defined it), the stable revision also heals: a restarted replica is kept until a fresh one is
 * ready in its place (surge first, as a restart is), and a missing one (failed, or restarted) is
 * started again from that definition, one at a time, up to the model's desired count (less the
 * new revision's one replica while it is checked or a canary). Without it
 * (a record from before the revision was kept, or a revision that cannot be read) a stable replica
 * that goes is not replaced, and the rollout view says the stable revision is gone.
 */
import type { Located } from './planner.js';

export interface StableInput {
  /** The model's live replicas of the stable revision. */
  readonly stable: readonly Located[];
  /** Replica ids asked to restart. */
  readonly restarts: ReadonlySet<string>;
  /** Starts of the stable revision in flight. */
  readonly pending: number;
  /**
   * How many stable replicas the model keeps serving now: its desired count, less the one a
   * rollout's new replica may take the room of while it is checked or a canary (the model never
   * drops below replicas − 1; healing up to the full count would take that room back, and the two
   * would drain each other in turn).
   */
  readonly asked: number;
  /** Whether the stable revision's definition is at hand. */
  readonly canStart: boolean;
}

export interface StablePlan {
  /** How many of the stable replicas to keep (the restarted ones are the first to go). */
  readonly keep: number;
  /** Whether to start one replica of the stable revision. */
  readonly start: boolean;
}

export function stablePlan(i: StableInput): StablePlan {
  const fresh = i.stable.filter((l) => !i.restarts.has(l.r.id));
  if (!i.canStart) return { keep: fresh.length, start: false };
  const freshReady = fresh.filter((l) => l.r.state === 'ready' && l.reachable).length;
  const restarted = i.stable.length - fresh.length;
  return {
    keep: fresh.length + Math.min(restarted, Math.max(0, i.asked - freshReady)),
    start: i.pending === 0 && fresh.length < i.asked,
  };
}

/** The order outdated replicas go in during a rollout: others first, then restarted stable ones, then fresh stable ones; oldest first. */
export function stableRank(l: Located, stable: string, restarts: ReadonlySet<string>): number {
  if (l.r.digest !== stable) return 0;
  return restarts.has(l.r.id) ? 1 : 2;
}
