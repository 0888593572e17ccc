/**
 * A new replica warmed from an old one's slot files (#38 item 3), then checked by replay: where the
 * decision allows it (engine-api/slot-restore.ts: same node, build, model file, cache flags), the
 * old replica's slots are saved to the model's slot dir on the node and restored into the same slots
 * of the new one (engine-api/slot-files.ts, reconciler/slot-calls.ts), before it takes traffic and within the warm-up's timeout.
 *
 * A restore can report success and still leave the cache useless (llama.cpp #26676), so the gain is
 * seen, not assumed: the replays follow (router/warmer.ts), the hottest prefix first, and the first
 * one's `cache_n` (the prompt tokens it took from the cache; on a replica that has served nothing,
 * only a restore can have put them there) must be at least RESTORE_GAIN_SHARE of its prompt. If it
 * is, the replica was warmed by restore (the rest of the replays are cheap: they find their tokens
 * there). If not, the replays went on as a plain warm-up and the replica was warmed by replay, with
 * SLOT_RESTORE_NO_GAIN; a save or restore the engine refused: SLOT_RESTORE_FAILED, and replay.
 * With no prefix known to replay, a restore that brought tokens is kept, unverified (said so in the log).
 */
import { reasonOf } from '../errors/catalogue.js';
import { restoreSlots, saveSlots, type SavedSlot } from '../reconciler/slot-calls.js';
import { runWarmup, type Replay, type WarmupResult } from './warmer.js';

/** The first replay's share of prompt tokens from the cache that shows a restore helped. */
export const RESTORE_GAIN_SHARE = 0.25;

/** What a save-and-restore did. */
export interface RestoreOutcome {
  /** Tokens the old replica's slots held (saved). */
  readonly saved: number;
  /** Tokens the new one restored. */
  readonly restored: number;
  readonly seconds: number;
  /** SLOT_RESTORE_FAILED with what the engine said; null when it went through. */
  readonly code: 'SLOT_RESTORE_FAILED' | null;
  readonly message: string | null;
}

/**
 * Saves the `slots` slots of the replica at `donor` (or takes `left`, files a stopped replica saved)
 * and restores those holding tokens into the replica at `target`. Never throws.
 */
export async function restoreFromDonor(donor: string, target: string, headers: Record<string, string>, slots: number, signal: AbortSignal, left?: readonly SavedSlot[]): Promise<RestoreOutcome> {
  const t0 = performance.now();
  let saved = 0;
  try {
    const files = left ?? (await saveSlots(donor, headers, slots, signal));
    saved = files.reduce((n, f) => n + f.tokens, 0);
    const restored = saved > 0 ? await restoreSlots(target, headers, files, signal) : 0;
    return { saved, restored, seconds: (performance.now() - t0) / 1000, code: null, message: null };
  } catch (e) {
    const r = reasonOf(e);
    const cut = signal.aborted ? ' (cut at the warm-up\'s timeout)' : '';
    return { saved, restored: 0, seconds: (performance.now() - t0) / 1000, code: 'SLOT_RESTORE_FAILED', message: `${r.message}${cut}` };
  }
}

/** How a replica was warmed, as the view, the event and the metrics say it. */
export interface SlotWarmVerdict {
  readonly via: 'restore' | 'replay';
  readonly code: string | null;
  readonly message: string | null;
  /** The restore was kept without a replay to check it (no prefix known). */
  readonly unverified: boolean;
}

/**
 * The verdict (pure) from the restore (null: none tried) and the replays after it: `first`, the
 * first replay alone (null: none sent), and `all`, every replay together (null: none).
 */
export function slotVerdict(restore: RestoreOutcome | null, first: WarmupResult | null, all: WarmupResult | null): SlotWarmVerdict {
  const replayCode = all?.code ?? null;
  const replayMsg = all?.message ?? null;
  const plain = { via: 'replay' as const, code: replayCode, message: replayMsg, unverified: false };
  if (restore === null) return plain;
  if (restore.code !== null) {
    const message = `${restore.message ?? 'the restore failed'}: warmed by replay${replayMsg ? `; ${replayMsg}` : ''}`;
    return { via: 'replay', code: replayCode ?? restore.code, message, unverified: false };
  }
  if (restore.restored <= 0) return plain;
  if (first === null || first.prefixes === 0) return { via: 'restore', code: replayCode, message: replayMsg, unverified: true };
  const prompt = first.tokens + first.cached;
  if (prompt > 0 && first.cached >= RESTORE_GAIN_SHARE * prompt) return { via: 'restore', code: replayCode, message: replayMsg, unverified: false };
  const message = `the new replica restored ${restore.restored} tokens from slot files, but its first replay took ${first.cached} of ${prompt} prompt tokens from the cache: warmed by replay${replayMsg ? `; ${replayMsg}` : ''}`;
  return { via: 'replay', code: replayCode ?? 'SLOT_RESTORE_NO_GAIN', message, unverified: false };
}

/** Two parts of a warm-up as one (the first replay, then the rest). */
export function joinResults(a: WarmupResult, b: WarmupResult | null): WarmupResult {
  if (b === null) return a;
  return { prefixes: a.prefixes + b.prefixes, tokens: a.tokens + b.tokens, cached: a.cached + b.cached, skipped: a.skipped + b.skipped, seconds: a.seconds + b.seconds, outcome: b.outcome, code: b.code, message: b.message };
}

/** What a warm-up with slot files did: the restore, the replays, the verdict. */
export interface SlotWarmup {
  readonly restore: RestoreOutcome;
  readonly replay: WarmupResult | null;
  readonly verdict: SlotWarmVerdict;
  readonly seconds: number;
}

/**
 * The warm-up with a restore: save `slots` slots at `donor`, restore into `target`, then `replays`
 * (the hottest first) within what is left of `timeoutMs`; with `left`, those files instead of a save. Never throws.
 */
export async function warmWithSlots(donor: string, target: string, headers: Record<string, string>, slots: number, replays: readonly Replay[], timeoutMs: number, signal?: AbortSignal, left?: readonly SavedSlot[]): Promise<SlotWarmup> {
  const t0 = performance.now();
  const timeout = AbortSignal.timeout(Math.max(1, timeoutMs));
  const restore = await restoreFromDonor(donor, target, headers, slots, signal ? AbortSignal.any([timeout, signal]) : timeout, left);
  const remaining = () => Math.max(1, Math.floor(timeoutMs - (performance.now() - t0)));
  let first: WarmupResult | null = null;
  let all: WarmupResult | null = null;
  if (replays.length > 0 && !signal?.aborted) {
    first = await runWarmup(target, headers, replays.slice(0, 1), remaining(), signal);
    const rest = first.outcome === 'done' && replays.length > 1 ? await runWarmup(target, headers, replays.slice(1), remaining(), signal) : null;
    all = joinResults(first, rest);
  }
  return { restore, replay: all, verdict: slotVerdict(restore, first, all), seconds: (performance.now() - t0) / 1000 };
}
