/**
 * The status branch's fence check, the I/O around status-fence.ts: walk the tip's first-parent
 * history back to the first commit whose Llmgw-Fence summary verifies (or the root, or a cut when the
 * writer holds the leader key), judge the fence against the writer's epoch and bound, and say what
 * summary the writer's own commit carries.
 *
 * A remote's mirror may hold the branch shallow (its first fetch takes SHALLOW_DEPTH commits, not the
 * whole history): a walk that must go past the shallow end deepens the mirror first (`deepen`), to
 * FENCE_WALK + 1 commits (enough for a cut), then to all of it.
 */
import * as fs from 'node:fs';
import git from 'isomorphic-git';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetRepo } from './repo.js';
import { EMPTY_HISTORY, FENCE_WALK, fenceUnder, historiesOf, mayCut, trustedSummary, type Fenced, type History, type WalkEnd, type WalkedCommit } from './status-fence.js';
import { epochOf } from './trailers.js';

/** Commits whose history this process knows (per gitdir), so a writer's next write reads one commit. */
const FENCE_CACHE = 4096;
const fenceCache = new Map<string, History>();

export interface FenceCheck {
  readonly branch: string;
  readonly epoch: number;
  readonly epochBound?: () => Promise<number>;
  /** The cluster's fence key: summaries are trusted under it. null: none is trusted (every walk goes to the root). */
  readonly key: Buffer | null;
  /** Fetch the branch's history to `depth` commits from its tip (a shallow mirror); null: the repo is not shallow (local). */
  readonly deepen: ((depth: number) => Promise<void>) | null;
}

export interface FenceResult {
  /** The tip's history, which the writer's summary carries. */
  readonly history: History;
  /** The highest epoch on the branch above the bound, ignored as a forgery (null: none). */
  readonly forged: { readonly epoch: number; readonly commit: string; readonly bound: number } | null;
}

/** Commits of the status branch a remote's first fetch takes: a signed summary is normally the tip's. */
export const SHALLOW_DEPTH = 64;
/** Depths a walk past the shallow end deepens to: enough for a cut, then git's infinite depth. */
const DEEPEN = [FENCE_WALK + 1, 0x7fffffff];

/** Reads commits of the branch; a missing one (past a shallow mirror's end) deepens the mirror. */
class Reader {
  private deepened = 0;
  /** Commits read (for tests' and logs' figures). */
  read = 0;
  constructor(
    private readonly repo: FleetRepo,
    private readonly deepen: ((depth: number) => Promise<void>) | null,
  ) {}

  async commit(oid: string): Promise<WalkedCommit> {
    for (;;) {
      try {
        const c = (await git.readCommit({ fs, gitdir: this.repo.gitdir, oid, cache: this.repo.cache })).commit;
        this.read++;
        return { oid, parent: c.parent[0], message: c.message };
      } catch (e) {
        const depth = DEEPEN[this.deepened];
        if ((e as { code?: string }).code !== 'NotFoundError' || !this.deepen || depth === undefined) throw e;
        this.deepened++;
        await this.deepen(depth);
      }
    }
  }
}

/** The tip's history: walked back to a summary that verifies, the cache, the root, or a cut the bound allows. */
async function historyOf(r: Reader, repo: FleetRepo, tip: string, o: FenceCheck, askBound: () => Promise<number>): Promise<History> {
  const walked: WalkedCommit[] = [];
  let end: WalkEnd = { kind: 'end' };
  let mayStop = o.epochBound !== undefined;
  for (let oid: string | undefined = tip; oid !== undefined; ) {
    const cached = fenceCache.get(`${repo.gitdir}\0${oid}`);
    if (cached) {
      end = { kind: 'known', history: cached };
      break;
    }
    const c = await r.commit(oid);
    walked.push(c);
    if (trustedSummary(c, o.key) !== null) break;
    oid = c.parent;
    if (oid !== undefined && mayStop && walked.length >= FENCE_WALK) {
      const bound = await askBound();
      if (mayCut(walked.length, o.epoch, bound)) {
        end = { kind: 'cut', cover: o.epoch };
        break;
      }
      mayStop = false; // not the key holder: every epoch below may be real; walk to the root
    }
  }
  const hs = historiesOf(walked, end, o.key);
  hs.forEach((h, i) => {
    if (h) fenceCache.set(`${repo.gitdir}\0${walked[i]!.oid}`, h);
  });
  while (fenceCache.size > FENCE_CACHE) fenceCache.delete(fenceCache.keys().next().value as string);
  return hs[0] ?? (end.kind === 'known' ? end.history : EMPTY_HISTORY);
}

/** The fence counting only epochs ≤ bound, by a walk to the root (when what is known of the history cannot tell). */
async function walkedFence(r: Reader, tip: string, bound: number): Promise<Fenced> {
  let found = { epoch: 0, commit: tip };
  for (let oid: string | undefined = tip; oid !== undefined; ) {
    const c = await r.commit(oid);
    const e = epochOf(c.message);
    if (e !== null && e <= bound && e > found.epoch) found = { epoch: e, commit: oid };
    oid = c.parent;
  }
  return found;
}

/**
 * Refuse to build on a branch whose first-parent history holds a newer epoch than this writer's
 * (STATUS_EPOCH_STALE); an epoch above `epochBound` is not real and fences nothing (`forged`).
 */
export async function checkFence(repo: FleetRepo, tip: string, o: FenceCheck): Promise<FenceResult> {
  const r = new Reader(repo, o.deepen);
  let bound: number | null = null;
  const askBound = async (): Promise<number> => (bound ??= await o.epochBound!());
  const history = await historyOf(r, repo, tip, o, askBound);
  let fence: Fenced = history.top[0] ?? { epoch: 0, commit: tip };
  let forged: FenceResult['forged'] = null;
  if (fence.epoch > o.epoch && o.epochBound) {
    const b = await askBound();
    if (fence.epoch > b) {
      forged = { epoch: fence.epoch, commit: fence.commit, bound: b };
      const under = fenceUnder(history, tip, b);
      fence = under === 'walk' ? await walkedFence(r, tip, b) : under;
    }
  }
  if (fence.epoch > o.epoch) {
    const where = fence.commit === tip ? `its head ${tip.slice(0, 12)} was written` : `its history holds ${fence.commit.slice(0, 12)} (head ${tip.slice(0, 12)}), written`;
    throw new LlmgwError(
      'STATUS_EPOCH_STALE',
      `status branch ${o.branch} (${repo.label}): ${where} by epoch ${fence.epoch}, newer than this writer's epoch ${o.epoch}; not written`,
      { branch: o.branch, epoch: o.epoch, headEpoch: fence.epoch, head: tip, ...(fence.commit === tip ? {} : { fencedBy: fence.commit }) },
    );
  }
  return { history, forged };
}
