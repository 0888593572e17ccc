/**
 * How many replicas a model with a replica range should run (pure: a function of the range, its
 * slots, its scale settings, the routers' load figures, its scale record and `now`; no clock, no I/O).
 *
 * - The load is the model's busy slots plus its queued requests, summed over every router whose
 *   report is fresh; a router silent for longer than the TTL counts as zero, never as its last figure.
 *   The queue wait is the oldest waiting request's, the longest over the fresh reports (aged by the
 *   report's age): it says how long requests have waited in the change's message and the metrics,
 *   and does not move the count (the count follows busy + queued).
 * - What the load wants: ⌈load / (slots per replica × target)⌉, clamped to the range.
 * - Up: once the load has wanted more than the current count for `up_after` without a break, the
 *   count goes to what it wants then, however many replicas that adds.
 * - Down: once the load has fitted in one replica fewer at DOWN_BAND of the target for `down_after`
 *   without a break, the count goes down by one; the next step waits a whole `down_after` again.
 *   The band is the hysteresis: a load hovering at the boundary that made the count go up does not
 *   take it down again.
 * - The count and both since-times live in the state record (ScaleRecord): a restart or failover
 *   continues a window where it was, and keeps the count, rather than beginning from an empty one.
 * - A range that moved (a new revision, a schedule entry) clamps the count at once.
 */
import type { ScaleSpec } from '../fleet-spec/types.js';

/** A model's replica range in force. */
export interface ReplicaRange {
  readonly min: number;
  readonly max: number;
}

/** What the record keeps of a model's scaling (ModelRecord.scale). */
export interface ScaleRecord {
  /** The count decided, within the range in force when it was decided. */
  readonly count: number;
  /** Epoch ms since when the load has wanted more than `count` (absent: it does not). */
  readonly upSince?: number;
  /** Epoch ms since when the load has fitted in fewer than `count` (absent: it does not). */
  readonly downSince?: number;
  /** The last change, for the surfaces: when, from, to and why (numbers included). */
  readonly last?: ScaleChange;
  /** When the decision wants to be taken again (a window's end, or the next look at a load that may grow). */
  readonly lookAt?: number;
}

export interface ScaleChange {
  readonly at: number;
  readonly from: number;
  readonly to: number;
  readonly direction: 'up' | 'down';
  readonly why: string;
}

/** One model's figures as one router reports them. */
export interface ModelLoad {
  /** Requests this router has on the model's replicas now (slots busy). */
  readonly busy: number;
  /** Requests waiting in this router's queue for a slot of the model (or for its activation). */
  readonly queued: number;
  /**
   * How long the oldest of those has waited (ms) when the report was taken: the queue wait the
   * figures carry (0 or absent: none waits). The fleet's is the longest over the fresh reports.
   */
  readonly waitMs?: number;
}

/** What one router reports: its figures per model, taken at `at` (epoch ms). */
export interface LoadReport {
  readonly router: string;
  readonly at: number;
  readonly models: Readonly<Record<string, ModelLoad>>;
}

/** The fleet's load of one model: the fresh reports summed; `silent`: routers left out as too old. */
export interface SummedLoad extends ModelLoad {
  readonly waitMs: number;
  readonly routers: number;
  readonly silent: number;
}

/** A router's report older than this counts as zero. */
export const LOAD_TTL_MS = 30_000;
/** Down only where the load fits in one replica fewer at this share of the target (hysteresis). */
export const DOWN_BAND = 0.9;
/** While a model under load could still grow, its load is looked at least this often (ms); above its min, every tenth of down_after (1 s to 30 s). */
export const SAMPLE_MS = 5_000;

/** The model's load over the routers' reports at `now` (reports older than ttlMs count as zero). */
export function loadOf(reports: readonly LoadReport[], model: string, now: number, ttlMs = LOAD_TTL_MS): SummedLoad {
  let busy = 0;
  let queued = 0;
  let waitMs = 0;
  let routers = 0;
  let silent = 0;
  for (const r of reports) {
    if (now - r.at > ttlMs) {
      silent++;
      continue;
    }
    routers++;
    const m = r.models[model];
    if (m === undefined) continue;
    busy += Math.max(0, m.busy);
    queued += Math.max(0, m.queued);
    // a report taken earlier than now: its oldest request has waited that much longer since
    if (m.waitMs !== undefined && m.waitMs > 0 && m.queued > 0) waitMs = Math.max(waitMs, m.waitMs + Math.max(0, now - r.at));
  }
  return { busy, queued, waitMs, routers, silent };
}

const clamp = (n: number, r: ReplicaRange): number => Math.min(r.max, Math.max(r.min, n));

/** Replicas the load wants at `share` of the target, clamped to the range (slots not finite: the min). */
export function wantedFor(load: number, slots: number, share: number, range: ReplicaRange): number {
  if (!Number.isFinite(slots) || slots <= 0 || share <= 0) return range.min;
  // a hair under an exact multiple is that multiple (6 requests at 2 slots × 100 %: 3, not 4)
  return clamp(load <= 0 ? 0 : Math.ceil(load / (slots * share) - 1e-9), range);
}

export interface ScaleInput {
  readonly range: ReplicaRange;
  /** Slots per replica (the profile's parallel). */
  readonly slots: number;
  readonly scale: ScaleSpec;
  readonly load: ModelLoad;
  readonly record: ScaleRecord | undefined;
  readonly now: number;
}

export interface ScaleDecision {
  readonly record: ScaleRecord;
  /** The count changed in this decision (up or down; a range clamp is not a scaling). */
  readonly change: ScaleChange | null;
  /** What the load wants now (clamped), whatever the windows say. */
  readonly wants: number;
  /** When the decision wants to be taken again (a window's end, or a sample before it); null: no need. */
  readonly nextAt: number | null;
}

const pct = (x: number): string => `${Math.round(x * 100)} %`;
const secs = (ms: number): string => (ms % 60_000 === 0 && ms >= 60_000 ? `${ms / 60_000} m` : `${Math.round(ms / 100) / 10} s`);

/** One decision for one model (see the file's comment). */
export function decideScale(i: ScaleInput): ScaleDecision {
  const { range, slots, scale, now } = i;
  const load = Math.max(0, i.load.busy) + Math.max(0, i.load.queued);
  const count = clamp(i.record?.count ?? range.min, range);
  const last = i.record?.last;
  const keep = (r: Omit<ScaleRecord, 'last'>): ScaleRecord => (last ? { ...r, last } : r);
  const wants = wantedFor(load, slots, scale.target, range);
  const capacity = (n: number): number => n * slots;

  if (wants > count) {
    const upSince = i.record?.upSince ?? now;
    if (now - upSince >= scale.upAfterMs) {
      const oldest = i.load.waitMs !== undefined && i.load.waitMs > 0 && i.load.queued > 0 ? `, the oldest waiting ${secs(i.load.waitMs)}` : '';
      const why = `${i.load.busy} busy and ${i.load.queued} waiting on ${capacity(count)} slot${capacity(count) === 1 ? '' : 's'} for ${secs(now - upSince)}${oldest} (target ${pct(scale.target)} busy)`;
      const change: ScaleChange = { at: now, from: count, to: wants, direction: 'up', why };
      return { record: { count: wants, last: change }, change, wants, nextAt: wants < range.max && load > 0 ? now + sampleMs(scale) : wants > range.min ? now + downSampleMs(scale) : null };
    }
    // the window's end, and a look before it: a load that fell back in between resets the window
    return { record: keep({ count, upSince }), change: null, wants, nextAt: Math.min(upSince + scale.upAfterMs, now + sampleMs(scale)) };
  }

  const fitsFewer = count > range.min && wantedFor(load, slots, scale.target * DOWN_BAND, range) < count;
  if (fitsFewer) {
    const downSince = i.record?.downSince ?? now;
    if (now - downSince >= scale.downAfterMs) {
      const busyShare = capacity(count) > 0 ? load / capacity(count) : 0;
      const why = `${pct(busyShare)} busy (${load} of ${capacity(count)} slots) for ${secs(now - downSince)} (target ${pct(scale.target)})`;
      const change: ScaleChange = { at: now, from: count, to: count - 1, direction: 'down', why };
      const next = count - 1;
      // another step down waits a whole down_after from this one
      const more = next > range.min;
      return { record: more ? { count: next, downSince: now, last: change } : { count: next, last: change }, change, wants, nextAt: more ? now + scale.downAfterMs : null };
    }
    // the window's end, and looks before it: a load that came back in between resets the window
    // (looked at only at its end, a load of 25 s on, 25 s off under down_after 60 s scaled in)
    return { record: keep({ count, downSince }), change: null, wants, nextAt: Math.min(downSince + scale.downAfterMs, now + downSampleMs(scale)) };
  }
  // no window: look again soon while the load could take it up, less often while it could take it down
  const nextAt = load > 0 && count < range.max ? now + sampleMs(scale) : count > range.min ? now + downSampleMs(scale) : null;
  return { record: keep({ count }), change: null, wants, nextAt };
}

function sampleMs(scale: ScaleSpec): number {
  return Math.max(1000, Math.min(SAMPLE_MS, scale.upAfterMs));
}

/** Above its min with no window open: a tenth of down_after, between 1 s and 30 s (the down window opens that late at most). */
function downSampleMs(scale: ScaleSpec): number {
  return Math.min(30_000, Math.max(1000, scale.downAfterMs / 10));
}

/** Whether two records say the same (a decision that changed nothing keeps the record's object). */
export function sameScale(a: ScaleRecord | undefined, b: ScaleRecord | undefined): boolean {
  return a?.count === b?.count && a?.upSince === b?.upSince && a?.downSince === b?.downSince && a?.last?.at === b?.last?.at && a?.lookAt === b?.lookAt;
}

/** The record as the decision leaves it, with its next look. */
export function withLook(d: ScaleDecision): ScaleRecord {
  const { lookAt: _old, ...rest } = d.record;
  return d.nextAt === null ? rest : { ...rest, lookAt: d.nextAt };
}
