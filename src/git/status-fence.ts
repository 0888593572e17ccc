/**
 * The status branch's epoch fence, as pure functions over the commits a writer walks (#37 item 5).
 *
 * The fence is the highest Llmgw-Epoch on the branch's first-parent history. Walking all of it is
 * O(history) for every new writer, so each commit a writer with the cluster's fence key makes carries
 * a summary of the history below it, `Llmgw-Fence: <epoch>@<commit> … [more] [cover=<n>] mac=<hex>`:
 * - the FENCE_TOP highest distinct epochs of its parent's first-parent history, each with the newest
 *   commit that carries it (forged ones too: every reader judges them against its own bound);
 * - `more`: there are lower epochs that did not fit;
 * - `cover=<n>`: part of that history was never read (a walk cut at FENCE_WALK commits by a writer
 *   that held the leader key at epoch n), and every real epoch there is ≤ n;
 * - `mac`: HMAC-SHA256 under the fence key (shared by the cluster's instances through etcd), over the
 *   parent's id, the commit's own Llmgw-Epoch and the rest of the summary.
 *
 * Trust: anyone who can push the branch can write a trailer, but not the mac. A summary whose mac
 * does not verify (a forgery, a hand copy onto another parent or epoch, another cluster's key) is
 * no summary: that commit is walked like any other, its epoch counted, and the walk goes on below.
 * So a forged summary can neither lower the fence (it is never trusted) nor raise it (only its
 * commit's Llmgw-Epoch counts, judged against the bound as every epoch is). A summary that verifies
 * was computed by an instance of this cluster; its epochs are still judged against the reader's own
 * bound, so after an etcd restore an epoch above the restored revision is passed over as forged.
 *
 * A writer walks back from the tip until the first commit with a summary that verifies (or the
 * branch's root), counting every epoch on the way: normally one commit (the last leader's). Commits
 * without one (history from before summaries, hand pushes) are walked; after FENCE_WALK of them the
 * writer asks its bound, and if the bound is not above its own epoch (it holds the leader key, so no
 * real epoch above its own exists) the rest cannot fence it and the walk stops there (`cover`).
 * Otherwise (it does not hold the key: it may be deposed) it walks on to the root.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { epochOf, trailerValues } from './trailers.js';

export const FENCE_TRAILER = 'Llmgw-Fence';
/** Distinct epochs a summary (and the in-memory cache) keeps per commit. */
export const FENCE_TOP = 8;
/** Commits walked without a summary that verifies before a key-holding writer may stop. */
export const FENCE_WALK = 1000;

export type Fenced = { readonly epoch: number; readonly commit: string };

/** What a writer knows of a commit's first-parent history (the commit included). */
export interface History {
  /** The highest distinct epochs, highest first, at most FENCE_TOP; each with the newest commit carrying it. */
  readonly top: readonly Fenced[];
  /** Every distinct epoch of the part read is in `top`. */
  readonly complete: boolean;
  /** null: the whole history was read. Else part of it was not, and every real epoch there is ≤ cover. */
  readonly cover: number | null;
}

export const EMPTY_HISTORY: History = { top: [], complete: true, cover: null };

/** `below` with a newer commit's epoch added. */
export function withEpoch(below: History, e: Fenced): History {
  const top = [e, ...below.top.filter((t) => t.epoch !== e.epoch)].sort((a, b) => b.epoch - a.epoch);
  return top.length > FENCE_TOP ? { top: top.slice(0, FENCE_TOP), complete: false, cover: below.cover } : { top, complete: below.complete, cover: below.cover };
}

function macOf(key: Buffer, parent: string, epoch: number, body: string): string {
  return createHmac('sha256', key).update(`llmgw-fence/1\n${parent}\n${epoch}\n${body}`).digest('hex').slice(0, 32);
}

function bodyOf(h: History): string {
  return [...h.top.map((t) => `${t.epoch}@${t.commit}`), ...(h.complete ? [] : ['more']), ...(h.cover === null ? [] : [`cover=${h.cover}`])].join(' ');
}

/** The Llmgw-Fence value of a commit on `parent` carrying Llmgw-Epoch `epoch`; `below` is the parent's history. */
export function formatSummary(below: History, parent: string, epoch: number, key: Buffer): string {
  const body = bodyOf(below);
  return `${body}${body ? ' ' : ''}mac=${macOf(key, parent, epoch, body)}`;
}

const ENTRY = /^([0-9]{1,16})@([0-9a-f]{40})$/;

/** A summary value's parts, or null when it is not one (no mac verification here). */
function parseBody(value: string): { history: History; body: string; mac: string } | null {
  const tokens = value.trim().split(/\s+/);
  const m = /^mac=([0-9a-f]{32})$/.exec(tokens[tokens.length - 1] ?? '');
  if (!m) return null;
  const parts = tokens.slice(0, -1);
  const top: Fenced[] = [];
  let complete = true;
  let cover: number | null = null;
  let stage = 0; // entries, then `more`, then `cover=`, in that order, once each
  for (const t of parts) {
    const e = ENTRY.exec(t);
    if (e && stage === 0) {
      const epoch = Number(e[1]);
      if (!Number.isSafeInteger(epoch) || (top.length > 0 && epoch >= top[top.length - 1]!.epoch)) return null;
      top.push({ epoch, commit: e[2]! });
    } else if (t === 'more' && stage === 0) {
      complete = false;
      stage = 1;
    } else if (t.startsWith('cover=') && stage <= 1 && /^cover=[0-9]{1,16}$/.test(t)) {
      cover = Number(t.slice(6));
      if (!Number.isSafeInteger(cover)) return null;
      stage = 2;
    } else return null;
  }
  if (top.length > FENCE_TOP) return null;
  return { history: { top, complete, cover }, body: parts.join(' '), mac: m[1]! };
}

export interface WalkedCommit {
  readonly oid: string;
  /** Its first parent; undefined for a root commit. */
  readonly parent: string | undefined;
  readonly message: string;
}

/**
 * The history a commit's summary vouches for (its own epoch added), or null when it carries none that
 * verifies under `key`: no Llmgw-Epoch, no parent, a malformed value, or a mac made for another
 * parent, epoch or key.
 */
export function trustedSummary(c: WalkedCommit, key: Buffer | null): History | null {
  if (key === null || c.parent === undefined) return null;
  const epoch = epochOf(c.message);
  if (epoch === null) return null;
  for (const v of trailerValues(c.message, FENCE_TRAILER)) {
    const p = parseBody(v);
    if (!p) continue;
    const want = Buffer.from(macOf(key, c.parent, epoch, p.body), 'utf8');
    const got = Buffer.from(p.mac, 'utf8');
    if (want.length === got.length && timingSafeEqual(want, got)) return withEpoch(p.history, { epoch, commit: c.oid });
  }
  return null;
}

/** How the walk ended below its last commit. */
export type WalkEnd =
  /** the last commit walked is the root, or carries a summary that verifies */
  | { readonly kind: 'end' }
  /** the history below the last commit walked is known (the in-memory cache) */
  | { readonly kind: 'known'; readonly history: History }
  /** the walk stopped at the last commit walked: every real epoch below it is ≤ cover */
  | { readonly kind: 'cut'; readonly cover: number };

/**
 * The history of each commit walked (tip first, each the first parent of the one before), tip first.
 * A commit whose summary verifies ends the walk: commits after it in `walked` are not looked at.
 */
export function historiesOf(walked: readonly WalkedCommit[], end: WalkEnd, key: Buffer | null): History[] {
  let n = walked.length;
  let base: History = end.kind === 'known' ? end.history : end.kind === 'cut' ? { ...EMPTY_HISTORY, cover: end.cover } : EMPTY_HISTORY;
  const out: History[] = [];
  let i = walked.findIndex((c) => trustedSummary(c, key) !== null);
  if (i >= 0) {
    n = i;
    base = trustedSummary(walked[i]!, key)!;
    out[i] = base;
  }
  for (i = n - 1; i >= 0; i--) {
    const c = walked[i]!;
    const e = epochOf(c.message);
    base = e === null ? base : withEpoch(base, { epoch: e, commit: c.oid });
    out[i] = base;
  }
  return out;
}

/** Whether a walk of `walked` commits without a summary may stop: the writer's bound is not above its epoch. */
export function mayCut(walked: number, epoch: number, bound: number): boolean {
  return walked >= FENCE_WALK && bound <= epoch;
}

/**
 * The fence counting only epochs ≤ bound (epochs above it are forgeries): the highest such epoch, a
 * zero fence at the tip when there is none, or 'walk' when the history as known cannot tell (lower
 * epochs did not fit in `top`, or an unread part may hold a real epoch ≤ bound above the ones known).
 */
export function fenceUnder(h: History, tip: string, bound: number): Fenced | 'walk' {
  if (h.cover !== null && h.cover > bound) return 'walk';
  const under = h.top.find((t) => t.epoch <= bound);
  if (under) return under;
  return h.complete && h.cover === null ? { epoch: 0, commit: tip } : 'walk';
}
