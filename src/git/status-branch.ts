/**
 * Write the machine-owned status branch (default llmgw/status) of the fleet repo: a tree and
 * commit built in the object store (no working tree is touched), committed only when the
 * tree changed, and published with compare-and-swap:
 * - remote: fetch the branch's tip, build on it, push non-force with a pre-push check that the
 *   remote still has that tip; the server's receive-pack swaps the ref only if it still holds
 *   the old value. Someone moved it → refetch, rebuild, retry.
 * - local: update the ref under git's own lock protocol (<ref>.lock, O_EXCL) only if it still
 *   holds the expected oid.
 * Only refs/heads/<branch> is ever updated, so operators pushing to main are never affected.
 *
 * Fencing (HA on etcd): a writer given its leader epoch puts it in the commit's Llmgw-Epoch
 * trailer, and before every swap attempt reads the epoch of the tip it builds on; a tip written by
 * a newer epoch is refused (STATUS_EPOCH_STALE), never built on or retried over. Since the swap
 * only succeeds on that same tip, epochs along the branch's first-parent history never decrease.
 * The fence is the highest epoch anywhere on that history, not the tip's: a commit pushed without
 * the trailer (or with a lower one) on top of a newer epoch resets nothing. Each commit carries a
 * summary of the history below it (Llmgw-Fence, under the cluster's key), so a new writer reads only
 * back to the last one that verifies, not the whole history (status-fence.ts).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { open, readFile, readdir, rename, unlink, mkdir, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import git, { type TreeEntry } from 'isomorphic-git';
import { LlmgwError } from '../errors/catalogue.js';
import { REMOTE_NAME, type FleetRepo } from './repo.js';
import { SHALLOW_DEPTH, checkFence, type FenceResult } from './status-fence-walk.js';
import { FENCE_TRAILER, formatSummary, type History } from './status-fence.js';
import { EPOCH_TRAILER, trailerValues, withTrailer } from './trailers.js';

export const DEFAULT_STATUS_BRANCH = 'llmgw/status';
const ZERO_OID = '0000000000000000000000000000000000000000';

export interface StatusBranchOptions {
  /** Default llmgw/status. Must not be the fleet branch. */
  readonly branch?: string;
  /** path → content (UTF-8). Paths are repo-relative, "/"-separated. */
  readonly files: Readonly<Record<string, string>>;
  readonly message: string;
  /**
   * The HA leader's fencing epoch (a non-negative integer). Given: the commit carries
   * `Llmgw-Epoch: <epoch>`, and a branch whose first-parent history carries a higher epoch is
   * refused with STATUS_EPOCH_STALE. Absent: no trailer, no check.
   */
  readonly epoch?: number;
  /**
   * The highest epoch that can be real (HA: etcd's current revision, read after the branch was
   * fetched). An epoch above it on the branch was not made by this etcd — a forged
   * `Llmgw-Epoch`, or a commit from before an etcd restore — and fences nothing: the write goes
   * on and the result names it (`forged`). Asked only when the history's fence is above `epoch`.
   */
  readonly epochBound?: () => Promise<number>;
  /**
   * The cluster's status fence key (HA: shared through etcd; ≥ 16 bytes). Given with an epoch: each
   * commit carries an `Llmgw-Fence` summary of the history below it under this key, and a summary
   * that verifies ends the fence walk (status-fence.ts). Absent: no summary is written or trusted.
   */
  readonly fenceKey?: Buffer;
  readonly author?: { readonly name: string; readonly email: string };
  /**
   * Remembers the blobs and trees of earlier writes (one per writer of the branch): a write that
   * changes one file of 10,000 hashes one blob and the trees above it, not every file.
   */
  readonly treeCache?: TreeCache;
  /** Attempts when someone else moved the branch (default 5). */
  readonly maxAttempts?: number;
  readonly now?: () => Date;
  /** Called after the commit is built, before the swap (push or ref update). Tests race here. */
  readonly beforeUpdate?: (attempt: number) => void | Promise<void>;
}

export interface StatusWriteResult {
  readonly changed: boolean;
  /** The branch tip after the call. */
  readonly oid: string;
  readonly attempts: number;
  /** The highest epoch on the branch above `epochBound`, ignored as a forgery (null: none). */
  readonly forged?: { readonly epoch: number; readonly commit: string; readonly bound: number } | null;
}

function checkBranchName(branch: string, fleetBranch: string): void {
  const bad =
    !/^[A-Za-z0-9._/-]+$/.test(branch) ||
    branch.split('/').some((s) => s === '' || s.startsWith('.') || s.endsWith('.lock')) ||
    branch.includes('..') ||
    branch.startsWith('-');
  if (bad) throw new LlmgwError('USAGE', `status branch name ${JSON.stringify(branch)} is not a valid branch name`);
  if (branch === fleetBranch) {
    throw new LlmgwError('USAGE', `status branch ${branch} is the fleet branch; llmgw writes status only to its own branch`);
  }
}

interface DirNode {
  readonly files: Map<string, string>;
  readonly dirs: Map<string, DirNode>;
}

/**
 * The oids of the blobs and trees a writer wrote last, by path. An entry is reused only while its
 * content is the same: a blob's oid is git's own hash of its text, computed here (so the texts are
 * not held: at 10,000 models they were ~5.5 MB, a second copy of every status file), a tree's entry
 * list is compared by its sha256. The objects stay in the repo's object store, reachable from the
 * status branch they were committed to.
 */
export class TreeCache {
  /** path → blob oid. */
  readonly blobs = new Map<string, string>();
  /** folder path ("" the root, else "a/b/") → the sha256 of its entry list, and the tree's oid. */
  readonly trees = new Map<string, { readonly key: string; readonly oid: string }>();
  constructor(readonly gitdir: string) {}
}

/** The oid git gives a blob of these bytes (sha1 of "blob <length>\0" and the bytes). */
function blobOid(bytes: Buffer): string {
  return createHash('sha1').update(`blob ${bytes.length}\0`).update(bytes).digest('hex');
}

/** Blobs and trees for the files; returns the root tree oid. With a cache, unchanged entries are not written again. */
export async function writeFilesTree(gitdir: string, files: Readonly<Record<string, string>>, cache?: TreeCache): Promise<string> {
  const reuse = cache && cache.gitdir === gitdir ? cache : null;
  const root: DirNode = { files: new Map(), dirs: new Map() };
  for (const [path, content] of Object.entries(files)) {
    const parts = path.split('/');
    if (parts.some((p) => p === '' || p === '.' || p === '..' || p === '.git')) {
      throw new LlmgwError('USAGE', `status file path ${JSON.stringify(path)} is not a plain repo-relative path`);
    }
    let dir = root;
    for (const p of parts.slice(0, -1)) {
      if (dir.files.has(p)) throw new LlmgwError('USAGE', `status file path ${path} goes through the file ${p}`);
      let next = dir.dirs.get(p);
      if (!next) {
        next = { files: new Map(), dirs: new Map() };
        dir.dirs.set(p, next);
      }
      dir = next;
    }
    const name = parts[parts.length - 1] as string;
    if (dir.dirs.has(name)) throw new LlmgwError('USAGE', `status file path ${path} is also a folder`);
    dir.files.set(name, content);
  }
  const seenBlobs = new Set<string>();
  const seenTrees = new Set<string>();
  const write = async (d: DirNode, at: string): Promise<string> => {
    const tree: TreeEntry[] = [];
    for (const [name, content] of d.files) {
      const path = `${at}${name}`;
      const bytes = Buffer.from(content, 'utf8');
      let oid: string;
      if (reuse) {
        oid = blobOid(bytes);
        if (reuse.blobs.get(path) !== oid) {
          await git.writeBlob({ fs, gitdir, blob: bytes });
          reuse.blobs.set(path, oid);
        }
        seenBlobs.add(path);
      } else {
        oid = await git.writeBlob({ fs, gitdir, blob: bytes });
      }
      tree.push({ mode: '100644', path: name, oid, type: 'blob' });
    }
    for (const [name, sub] of d.dirs) tree.push({ mode: '040000', path: name, oid: await write(sub, `${at}${name}/`), type: 'tree' });
    if (!reuse) return git.writeTree({ fs, gitdir, tree });
    const key = tree.reduce((h, e) => h.update(`${e.mode} ${e.path} ${e.oid}\n`), createHash('sha256')).digest('hex');
    seenTrees.add(at);
    const known = reuse.trees.get(at);
    if (known && known.key === key) return known.oid;
    const oid = await git.writeTree({ fs, gitdir, tree });
    reuse.trees.set(at, { key, oid });
    return oid;
  };
  const oid = await write(root, '');
  // Files and folders gone from this write are forgotten (the cache holds one write's tree).
  if (reuse) {
    for (const p of reuse.blobs.keys()) if (!seenBlobs.has(p)) reuse.blobs.delete(p);
    for (const p of reuse.trees.keys()) if (!seenTrees.has(p)) reuse.trees.delete(p);
  }
  return oid;
}

async function treeOf(repo: FleetRepo, commit: string): Promise<string> {
  return (await git.readCommit({ fs, gitdir: repo.gitdir, oid: commit, cache: repo.cache })).commit.tree;
}

async function makeCommit(repo: FleetRepo, tree: string, parent: string | null, opts: StatusBranchOptions, below: History | null): Promise<string> {
  const now = (opts.now ?? (() => new Date()))();
  const who = {
    name: opts.author?.name ?? 'llmgw',
    email: opts.author?.email ?? 'llmgw@localhost',
    timestamp: Math.floor(now.getTime() / 1000),
    timezoneOffset: 0,
  };
  let message = opts.epoch === undefined ? (opts.message.endsWith('\n') ? opts.message : `${opts.message}\n`) : withTrailer(opts.message, EPOCH_TRAILER, String(opts.epoch));
  // the fence summary of the history below (status-fence.ts), under the cluster's key
  if (opts.epoch !== undefined && opts.fenceKey && parent !== null && below !== null) {
    message = withTrailer(message, FENCE_TRAILER, formatSummary(below, parent, opts.epoch, opts.fenceKey));
  }
  return git.writeCommit({ fs, gitdir: repo.gitdir, commit: { tree, parent: parent ? [parent] : [], author: who, committer: who, message } });
}

/** The fence check of the tip (none without an epoch or a tip). */
async function fenceOf(repo: FleetRepo, branch: string, tip: string | null, opts: StatusBranchOptions, deepen: ((depth: number) => Promise<void>) | null): Promise<FenceResult | null> {
  if (opts.epoch === undefined || tip === null) return null;
  return checkFence(repo, tip, {
    branch,
    epoch: opts.epoch,
    ...(opts.epochBound ? { epochBound: opts.epochBound } : {}),
    key: opts.fenceKey ?? null,
    deepen,
  });
}

function checkEpoch(opts: StatusBranchOptions): void {
  if (opts.epoch === undefined) return;
  if (!Number.isSafeInteger(opts.epoch) || opts.epoch < 0) {
    throw new LlmgwError('USAGE', `status branch epoch ${String(opts.epoch)} is not a non-negative integer`);
  }
  for (const t of [EPOCH_TRAILER, FENCE_TRAILER]) {
    if (trailerValues(opts.message, t).length > 0) throw new LlmgwError('USAGE', `the status message already has an ${t} trailer; the writer adds it itself`);
  }
  if (opts.fenceKey !== undefined && opts.fenceKey.length < 16) throw new LlmgwError('USAGE', 'the status fence key is shorter than 16 bytes');
}

// --- local repos: git's ref lock protocol ---

async function readLocalRef(gitdir: string, ref: string): Promise<string | null> {
  try {
    const v = (await readFile(join(gitdir, ref), 'utf8')).trim();
    if (/^[0-9a-f]{40}$/.test(v)) return v;
    throw new LlmgwError('GIT_FAILED', `${ref} in ${gitdir} does not hold a commit id (symbolic ref?)`);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e;
  }
  let packed: string;
  try {
    packed = await readFile(join(gitdir, 'packed-refs'), 'utf8');
  } catch {
    return null;
  }
  for (const line of packed.split('\n')) {
    const m = /^([0-9a-f]{40}) (.+)$/.exec(line);
    if (m && m[2] === ref) return m[1] as string;
  }
  return null;
}

/**
 * How long a writer waits for another writer's <ref>.lock before it counts the attempt as lost.
 * Git waits 100 ms (core.filesRefLockTimeout); the holder's fsync on a busy disk can take longer,
 * and a writer that gives up at once loses every attempt while the other one syncs.
 */
const LOCK_WAIT_MS = 1000;

/** Create the lock file, waiting (backing off 1 ms → 50 ms) while someone else holds it; null when it stays held. */
async function takeLock(lockPath: string): Promise<FileHandle | null> {
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (let delay = 1; ; delay = Math.min(delay * 2, 50)) {
    try {
      return await open(lockPath, 'wx');
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    }
    const left = deadline - Date.now();
    if (left <= 0) return null;
    await sleep(Math.min(delay, left));
  }
}

type LocalSwap = 'swapped' | 'moved' | 'locked';

/** Set ref to next only if it still holds expected (null: absent). */
async function casLocalRef(gitdir: string, ref: string, expected: string | null, next: string): Promise<LocalSwap> {
  const refPath = join(gitdir, ref);
  const lockPath = `${refPath}.lock`;
  await mkdir(dirname(refPath), { recursive: true });
  let fh = await takeLock(lockPath);
  if (!fh) return 'locked';
  let renamed = false;
  try {
    if ((await readLocalRef(gitdir, ref)) !== expected) return 'moved';
    await fh.writeFile(`${next}\n`);
    await fh.sync();
    await fh.close();
    fh = null;
    await rename(lockPath, refPath);
    renamed = true;
    return 'swapped';
  } finally {
    if (fh) await fh.close();
    if (!renamed) await unlink(lockPath).catch(() => undefined);
  }
}

/** Refuse a status branch that is checked out in the repo or one of its worktrees. */
async function assertNotCheckedOut(gitdir: string, ref: string): Promise<void> {
  const heads = [join(gitdir, 'HEAD')];
  try {
    for (const w of await readdir(join(gitdir, 'worktrees'))) heads.push(join(gitdir, 'worktrees', w, 'HEAD'));
  } catch {
    /* no worktrees */
  }
  for (const h of heads) {
    const v = await readFile(h, 'utf8').catch(() => '');
    if (v.trim() === `ref: ${ref}`) {
      throw new LlmgwError('GIT_FAILED', `${ref} is checked out in a working tree; llmgw will not move a checked-out branch`, { ref });
    }
  }
}

// --- remote repos ---

const MOVED = new Set(['UserCanceledError', 'PushRejectedError', 'GitPushError']);

export async function writeStatusBranch(repo: FleetRepo, opts: StatusBranchOptions): Promise<StatusWriteResult> {
  const branch = opts.branch ?? DEFAULT_STATUS_BRANCH;
  checkBranchName(branch, repo.branch);
  checkEpoch(opts);
  await repo.open();
  const ref = `refs/heads/${branch}`;
  const maxAttempts = Math.max(1, opts.maxAttempts ?? 5);
  let token: string | null = null;
  let heldLock: string | null = null;
  let forged: StatusWriteResult['forged'] = null;
  try {
    const tree = await writeFilesTree(repo.gitdir, opts.files, opts.treeCache);
    if (repo.kind === 'local') {
      await assertNotCheckedOut(repo.gitdir, ref);
      for (let attempt = 0; attempt < maxAttempts; attempt++) {
        const tip = await readLocalRef(repo.gitdir, ref);
        const fence = await fenceOf(repo, branch, tip, opts, null);
        forged = fence?.forged ?? null;
        if (tip && (await treeOf(repo, tip)) === tree) return { changed: false, oid: tip, attempts: attempt + 1, ...(forged ? { forged } : {}) };
        const commit = await makeCommit(repo, tree, tip, opts, fence?.history ?? null);
        await opts.beforeUpdate?.(attempt);
        const swap = await casLocalRef(repo.gitdir, ref, tip, commit);
        if (swap === 'swapped') return { changed: true, oid: commit, attempts: attempt + 1, ...(forged ? { forged } : {}) };
        heldLock = swap === 'locked' ? join(repo.gitdir, `${ref}.lock`) : null;
      }
    } else {
      const a = repo.auth();
      token = a.token;
      for (let attempt = 0; attempt < maxAttempts; attempt++) {
        // A first fetch takes the last SHALLOW_DEPTH commits, not the whole history (a year of churn
        // is 10^5–10^6 commits, each with its own tree); a fence walk that must go further deepens it.
        const shallow = (await git.resolveRef({ fs, gitdir: repo.gitdir, ref: repo.branchRef(branch) }).catch(() => null)) === null;
        const tip = await repo.fetchBranch(branch, a.onAuth, shallow ? SHALLOW_DEPTH : undefined);
        const fence = await fenceOf(repo, branch, tip, opts, (depth) => repo.fetchBranch(branch, a.onAuth, depth).then(() => undefined));
        forged = fence?.forged ?? null;
        if (tip && (await treeOf(repo, tip)) === tree) return { changed: false, oid: tip, attempts: attempt + 1, ...(forged ? { forged } : {}) };
        const commit = await makeCommit(repo, tree, tip, opts, fence?.history ?? null);
        // The mirror's own branch ref is what push sends; the mirror has no working tree.
        await git.writeRef({ fs, gitdir: repo.gitdir, ref, value: commit, force: true });
        await opts.beforeUpdate?.(attempt);
        try {
          await git.push({
            fs,
            http: repo.http,
            gitdir: repo.gitdir,
            url: repo.url as string,
            remote: REMOTE_NAME,
            ref,
            remoteRef: ref,
            force: false,
            cache: repo.cache,
            // Compare-and-swap: push only if the remote still has the tip we built on.
            onPrePush: ({ remoteRef }) => remoteRef.oid === (tip ?? ZERO_OID),
            ...(a.onAuth ? { onAuth: a.onAuth } : {}),
          });
          return { changed: true, oid: commit, attempts: attempt + 1, ...(forged ? { forged } : {}) };
        } catch (e) {
          if (!MOVED.has((e as { code?: string }).code ?? '')) throw e;
        }
      }
    }
  } catch (e) {
    throw repo.fail(e, `write status branch ${branch}`, token);
  }
  if (heldLock) {
    throw new LlmgwError(
      'GIT_PUSH_REJECTED',
      `write status branch ${branch} (${repo.label}): ${heldLock} stayed locked; gave up after ${maxAttempts} attempts (if no llmgw or git process is writing the repo, a crashed writer left it: remove it)`,
      { branch, attempts: maxAttempts, lock: heldLock },
    );
  }
  throw new LlmgwError('GIT_PUSH_REJECTED', `write status branch ${branch} (${repo.label}): the branch kept moving; gave up after ${maxAttempts} attempts`, {
    branch,
    attempts: maxAttempts,
  });
}
