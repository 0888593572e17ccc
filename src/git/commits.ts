/**
 * Commit history: every commit reachable from head and not from base (merges and the commits
 * of merged branches included), oldest first. Commits are immutable, so parsed commits are
 * cached per gitdir; a second walk over the same history reads nothing from disk.
 */
import * as fs from 'node:fs';
import git from 'isomorphic-git';

export interface CommitInfo {
  readonly oid: string;
  readonly parents: readonly string[];
  readonly message: string;
  /** timestamp: seconds since the epoch, as git stores it. */
  readonly author: { readonly name: string; readonly email: string; readonly timestamp: number };
}

export class CommitGraph {
  private readonly commits = new Map<string, CommitInfo>();

  constructor(
    private readonly gitdir: string,
    /** isomorphic-git's object cache to use (the repo renews it). */
    private readonly cache: () => object = () => ({}),
  ) {}

  async read(oid: string): Promise<CommitInfo> {
    const hit = this.commits.get(oid);
    if (hit) return hit;
    const { commit } = await git.readCommit({ fs, gitdir: this.gitdir, oid, cache: this.cache() });
    const info: CommitInfo = Object.freeze({
      oid,
      parents: Object.freeze([...commit.parent]),
      message: commit.message,
      author: Object.freeze({ name: commit.author.name, email: commit.author.email, timestamp: commit.author.timestamp }),
    });
    this.commits.set(oid, info);
    return info;
  }

  /** Every commit reachable from `from` (inclusive). */
  private async ancestors(from: string): Promise<Set<string>> {
    const seen = new Set<string>([from]);
    const stack = [from];
    while (stack.length > 0) {
      const c = await this.read(stack.pop() as string);
      for (const p of c.parents) {
        if (!seen.has(p)) {
          seen.add(p);
          stack.push(p);
        }
      }
    }
    return seen;
  }

  /**
   * Commits reachable from head and not from base, parents before children (a depth-first
   * post-order from head, first parents first). base null → only the head commit.
   */
  async between(base: string | null, head: string): Promise<CommitInfo[]> {
    if (base === null) return [await this.read(head)];
    if (base === head) return [];
    const excluded = await this.ancestors(base);
    const out: CommitInfo[] = [];
    const done = new Set<string>();
    // Iterative post-order DFS: a frame is (commit, index of the next parent to visit).
    const stack: Array<{ c: CommitInfo; next: number }> = [];
    if (!excluded.has(head)) stack.push({ c: await this.read(head), next: 0 });
    const entered = new Set<string>([head]);
    while (stack.length > 0) {
      const top = stack[stack.length - 1] as { c: CommitInfo; next: number };
      const p = top.c.parents[top.next];
      if (p === undefined) {
        stack.pop();
        if (!done.has(top.c.oid)) {
          done.add(top.c.oid);
          out.push(top.c);
        }
        continue;
      }
      top.next++;
      if (excluded.has(p) || entered.has(p)) continue;
      entered.add(p);
      stack.push({ c: await this.read(p), next: 0 });
    }
    return out;
  }
}
