/**
 * Canary windows as the routers of an HA cluster publish them to the leader (#34), pure: what one
 * router writes (`encodeWindows`), what the leader accepts of it (`decodeWindows`: a value from etcd
 * is checked, never trusted), which windows it keeps (`keptWindows`) and the sum it judges a step on
 * (`summedWindow`). The shell is src/ha/rollout-figures.ts.
 *
 * A value is one router's windows, `{ v: 1, bounds: N, models: { name: { canaryDigest, window } } }`:
 * counts over the fixed latency bounds (latency.ts), so it is small (~3 KB a model in its canary
 * step) and bounded (MAX_PUBLISHED_BYTES; a router with more drops its oldest windows). Windows add
 * up only when they are of the same revision (digest) AND began at the same `since`: a window of an
 * older step, or one begun again elsewhere, is never counted into the current one.
 */
import { LATENCY_BOUNDS_MS, totalOf, TTFT_BUCKETS } from './latency.js';
import type { ArmWindow, CanaryWindow, LatencyCounts } from './types.js';
import { mergeWindows } from './window.js';

export const PUBLISHED_WINDOWS_VERSION = 1;
/** The most one router's value holds (bytes): room for ~80 models in their canary step at once. */
export const MAX_PUBLISHED_BYTES = 256 * 1024;
/** A count above this is not a window's (a router would need centuries of requests): the value is refused. */
const MAX_COUNT = 1e12;
const DIGEST_RE = /^[A-Za-z0-9:._+-]{1,160}$/;
/** A model's name as a key (kept in a Map: a name that is no model's is never asked for). */
const MAX_MODEL_NAME = 128;

/** One model's window as a router keeps it (RolloutFigures.all()'s entries). */
export interface ModelWindow {
  readonly canaryDigest: string;
  readonly window: CanaryWindow;
}

export type Decoded = { readonly ok: true; readonly windows: ReadonlyMap<string, ModelWindow> } | { readonly ok: false; readonly problem: string };

/**
 * One router's value: the windows `live` keeps (the router's view shows that step), newest first
 * while they fit in MAX_PUBLISHED_BYTES; null when there are none (the key is removed). `dropped`:
 * the models left out for room.
 */
export function encodeWindows(all: Readonly<Record<string, ModelWindow>>, live: (model: string, w: ModelWindow) => boolean = () => true): { readonly value: string | null; readonly dropped: readonly string[] } {
  const entries = Object.entries(all)
    .filter(([m, w]) => live(m, w))
    .sort(([, a], [, b]) => b.window.since - a.window.since);
  if (entries.length === 0) return { value: null, dropped: [] };
  const head = `{"v":${PUBLISHED_WINDOWS_VERSION},"bounds":${LATENCY_BOUNDS_MS.length},"models":{`;
  const parts: string[] = [];
  const dropped: string[] = [];
  let size = byteLength(head) + 2;
  for (const [m, w] of entries) {
    const part = `${JSON.stringify(m)}:${JSON.stringify({ canaryDigest: w.canaryDigest, window: w.window })}`;
    const more = byteLength(part) + (parts.length > 0 ? 1 : 0);
    if (size + more > MAX_PUBLISHED_BYTES) {
      dropped.push(m);
      continue;
    }
    parts.push(part);
    size += more;
  }
  return { value: parts.length === 0 ? null : `${head}${parts.join(',')}}}`, dropped };
}

const byteLength = (s: string): number => new TextEncoder().encode(s).length;

/** A router's value read from etcd, checked: any fault refuses the whole value, with what was wrong. */
export function decodeWindows(raw: string): Decoded {
  if (byteLength(raw) > MAX_PUBLISHED_BYTES) return { ok: false, problem: `larger than ${MAX_PUBLISHED_BYTES} bytes` };
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    return { ok: false, problem: 'not JSON' };
  }
  if (!isObject(v)) return { ok: false, problem: 'not an object' };
  if (v.v !== PUBLISHED_WINDOWS_VERSION) return { ok: false, problem: `format ${JSON.stringify(v.v)}; this llmgw reads ${PUBLISHED_WINDOWS_VERSION}` };
  if (v.bounds !== LATENCY_BOUNDS_MS.length) return { ok: false, problem: `latency counted over ${JSON.stringify(v.bounds)} bounds; this llmgw counts over ${LATENCY_BOUNDS_MS.length}` };
  if (!isObject(v.models)) return { ok: false, problem: 'models is not an object' };
  const windows = new Map<string, ModelWindow>();
  for (const [model, e] of Object.entries(v.models)) {
    if (model.length === 0 || model.length > MAX_MODEL_NAME) return { ok: false, problem: `a model name of ${model.length} characters (1–${MAX_MODEL_NAME})` };
    const problem = entryProblem(e);
    if (problem !== null) return { ok: false, problem: `${model}: ${problem}` };
    windows.set(model, e as ModelWindow);
  }
  return { ok: true, windows };
}

function entryProblem(e: unknown): string | null {
  if (!isObject(e)) return 'not an object';
  if (typeof e.canaryDigest !== 'string' || !DIGEST_RE.test(e.canaryDigest)) return 'canaryDigest is not a digest';
  const w = e.window;
  if (!isObject(w)) return 'window is not an object';
  if (typeof w.since !== 'number' || !Number.isSafeInteger(w.since) || w.since < 0) return 'window.since is not a time (epoch ms)';
  return armProblem('stable', w.stable) ?? armProblem('canary', w.canary);
}

function armProblem(arm: string, a: unknown): string | null {
  if (!isObject(a)) return `${arm} is not an object`;
  if (!isCount(a.requests) || !isCount(a.errors) || a.errors > a.requests) return `${arm}: requests and errors are not counts with errors ≤ requests`;
  const answered = a.requests - a.errors;
  if (!isObject(a.ttft)) return `${arm}: ttft is not an object`;
  let ttft = 0;
  for (const [bucket, counts] of Object.entries(a.ttft)) {
    if (!TTFT_BUCKETS.has(bucket)) return `${arm}: ${JSON.stringify(bucket.slice(0, 40))} is not a TTFT bucket`;
    if (!isCounts(counts)) return `${arm}: ttft ${bucket} is not ${LATENCY_BOUNDS_MS.length + 1} counts`;
    ttft += totalOf(counts);
  }
  if (ttft > answered) return `${arm}: ${ttft} TTFT counts for ${answered} answered requests`;
  if (!isCounts(a.tpot)) return `${arm}: tpot is not ${LATENCY_BOUNDS_MS.length + 1} counts`;
  if (totalOf(a.tpot) > answered) return `${arm}: ${totalOf(a.tpot)} time-per-token counts for ${answered} answered requests`;
  return null;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= MAX_COUNT;
const isCounts = (v: unknown): v is LatencyCounts => Array.isArray(v) && v.length === LATENCY_BOUNDS_MS.length + 1 && v.every(isCount);

/**
 * What the leader keeps of the other routers after a read: every router's windows as read now, and
 * a router no longer read (it stopped, was killed, its lease ran out) keeps the windows of the step
 * the leader is judging now (same revision and since as `local`'s), since what it saw happened — so
 * a router that died mid-step takes neither its errors nor its requests with it. Everything else of
 * it is dropped.
 */
export function keptWindows(
  before: ReadonlyMap<string, ReadonlyMap<string, ModelWindow>>,
  read: ReadonlyMap<string, ReadonlyMap<string, ModelWindow>>,
  local: Readonly<Record<string, ModelWindow>>,
): Map<string, ReadonlyMap<string, ModelWindow>> {
  const out = new Map<string, ReadonlyMap<string, ModelWindow>>(read);
  for (const [router, windows] of before) {
    if (read.has(router)) continue;
    const current = new Map<string, ModelWindow>();
    for (const [model, w] of windows) if (sameStep(w, local[model])) current.set(model, w);
    if (current.size > 0) out.set(router, current);
  }
  return out;
}

const sameStep = (a: ModelWindow | undefined, b: ModelWindow | undefined): boolean => a !== undefined && b !== undefined && a.canaryDigest === b.canaryDigest && a.window.since === b.window.since;

/**
 * The leader's window for `model`'s canary `canaryDigest`: its own router's (`local`, which began it)
 * plus each other router's of the same revision and the same `since`; null when the leader keeps none.
 * `routers`: how many routers' windows were added (the leader's own included).
 */
export function summedWindow(local: CanaryWindow | null, canaryDigest: string, others: Iterable<ModelWindow | undefined>): { readonly window: CanaryWindow; readonly routers: number } | null {
  if (local === null) return null;
  let stable: ArmWindow = local.stable;
  let canary: ArmWindow = local.canary;
  let routers = 1;
  for (const o of others) {
    if (o === undefined || o.canaryDigest !== canaryDigest || o.window.since !== local.since) continue;
    stable = mergeWindows(stable, o.window.stable);
    canary = mergeWindows(canary, o.window.canary);
    routers++;
  }
  return { window: { since: local.since, stable, canary }, routers };
}
