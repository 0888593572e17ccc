/**
 * The port through which the reconciler has a new replica warmed up before it takes traffic (issue
 * #38 item 2): its start, once /health is 200, hands the replica to it and concludes ready only when
 * it returns. Meanwhile every look shows the replica starting (NodeFleet.warmingUp), so a surge's old
 * replica keeps serving and no router is offered the new one. The implementation (the composition
 * root's: router/warmer.ts over the router's hot prefixes) bounds itself by the profile's
 * `warmup.timeout`, so a warm-up never holds a replica back longer than that.
 */
import type { Logger } from 'pino';
import type { SlotRestoreDecision } from '../engine-api/slot-restore.js';
import type { ProfileSpec } from '../fleet-spec/types.js';
import type { SavedSlot } from './slot-calls.js';
import type { WarmupView } from './view.js';

/** The replica to warm. */
export interface WarmupTarget {
  readonly model: string;
  readonly node: string;
  readonly replica: string;
  /** http://host:port of its llama-server. */
  readonly endpoint: string;
  readonly profile: ProfileSpec;
  /**
   * A live replica of the model on the same node whose slots it may restore (#38 item 3; slot-donor.ts):
   * where, and the decision (restore only where node, build, model file and cache flags match).
   */
  readonly slots?: {
    readonly donor: string;
    /** The donor's llama-server, whose slots are saved first; '' with `saved`. */
    readonly endpoint: string;
    readonly decision: SlotRestoreDecision;
    /** Slot files already on the node (a replica stopped as idle saved them): restored without a save. */
    readonly saved?: readonly SavedSlot[];
  };
}

/** Warms `target` up; resolves when done, failed or timed out with what it did (null: nothing to replay); `signal`: the controller stops. */
export type ReplicaWarmup = (target: WarmupTarget, signal: AbortSignal, log: Logger) => Promise<WarmupView | null>;

/** Warm-ups remembered for the snapshot's replicas (the newest; a replica that left is forgotten by then). */
export const WARMUPS_KEPT = 1024;
