/**
 * SpecTracker: sync the fleet repo, load the spec at a new head, and keep the last valid one
 * in force. An invalid revision is rejected whole (and shown); retry trailers are counted from
 * the last *applied* revision, so those in rejected commits surface once a later one applies.
 */
import { LlmgwError, isLlmgwError } from '../errors/catalogue.js';
import type { FleetFiles } from '../fleet-spec/files.js';
import { loadFleetSpec } from '../fleet-spec/load.js';
import type { FleetSpec, LoadResult, Problem } from '../fleet-spec/types.js';
import type { CommitInfo } from './commits.js';
import { extractRetries, type RetryRequest } from './trailers.js';

export type SpecLoader = (files: FleetFiles, revision: string | null) => Promise<LoadResult>;

/** What the tracker needs of a FleetRepo (a fake works in unit tests). */
export interface TrackedRepo {
  sync(): Promise<{ head: string }>;
  files(oid: string): FleetFiles;
  commitsBetween(base: string | null, head: string): Promise<CommitInfo[]>;
}

export interface AppliedSpec {
  readonly spec: FleetSpec;
  readonly revision: string;
  readonly warnings: readonly Problem[];
  readonly at: Date;
}

export interface RejectedRevision {
  readonly revision: string;
  readonly problems: readonly Problem[];
  readonly at: Date;
}

export type RefreshOutcome = 'unchanged' | 'applied' | 'rejected' | 'failed';

export interface RefreshResult {
  readonly outcome: RefreshOutcome;
  /** The synced head (null when the sync failed). */
  readonly head: string | null;
  /** Retries requested by commits that became applied in this refresh (oldest first). */
  readonly retries: readonly RetryRequest[];
  readonly error: LlmgwError | null;
}

export interface SpecTrackerOptions {
  /** Defaults to loadFleetSpec. */
  readonly load?: SpecLoader;
  readonly now?: () => Date;
  /**
   * The revision applied before a restart (from the state file): retries are then counted
   * from it instead of only the head commit.
   */
  readonly resumeFrom?: string | null;
}

function asLlmgwError(e: unknown, what: string): LlmgwError {
  if (isLlmgwError(e)) return e;
  return new LlmgwError('GIT_FAILED', `${what}: ${e instanceof Error ? e.message : String(e)}`);
}

export class SpecTracker {
  applied: AppliedSpec | null = null;
  rejected: RejectedRevision | null = null;
  lastSyncOk: Date | null = null;
  lastSyncError: LlmgwError | null = null;
  /** The last head fully processed (applied or rejected). */
  lastSeen: string | null = null;
  private lastApplied: string | null;
  private readonly load: SpecLoader;
  private readonly now: () => Date;
  private inflight: Promise<RefreshResult> | null = null;

  constructor(
    private readonly repo: TrackedRepo,
    opts: SpecTrackerOptions = {},
  ) {
    this.load = opts.load ?? loadFleetSpec;
    this.now = opts.now ?? (() => new Date());
    this.lastApplied = opts.resumeFrom ?? null;
  }

  /** Sync and apply or reject a new head. Never throws; concurrent calls share one refresh. */
  refresh(): Promise<RefreshResult> {
    this.inflight ??= this.doRefresh().finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  private fail(head: string | null, e: unknown, what: string): RefreshResult {
    const error = asLlmgwError(e, what);
    this.lastSyncError = error;
    return { outcome: 'failed', head, retries: [], error };
  }

  private async commitsSinceApplied(head: string): Promise<CommitInfo[]> {
    try {
      return await this.repo.commitsBetween(this.lastApplied, head);
    } catch (e) {
      // A resumed revision the repo no longer has (history rewritten, other repo): start afresh.
      if (this.lastApplied !== null && isLlmgwError(e, 'GIT_REF_NOT_FOUND')) return this.repo.commitsBetween(null, head);
      throw e;
    }
  }

  /**
   * Restarted on a rejected head: the revision applied before the restart stays in force, so it is
   * loaded again (else the controller would have no spec at all until a valid commit came).
   */
  private async loadResumed(head: string): Promise<void> {
    const rev = this.lastApplied;
    if (this.applied !== null || rev === null || rev === head) return;
    try {
      const r = await this.load(this.repo.files(rev), rev);
      if (r.ok) this.applied = { spec: r.spec, revision: rev, warnings: r.warnings, at: this.now() };
    } catch {
      // the resumed revision is gone from the repo: nothing is in force until a valid head comes
    }
  }

  /**
   * The spec at an earlier revision, read and never applied (a rollout's stable revision: its
   * replicas start again from it). Throws a typed error: the revision is gone (GIT_*), or it does
   * not validate with this llmgw (SPEC_REJECTED).
   */
  async specAt(revision: string): Promise<FleetSpec> {
    if (this.applied?.revision === revision) return this.applied.spec;
    const r = await this.load(this.repo.files(revision), revision);
    if (!r.ok) throw new LlmgwError('SPEC_REJECTED', `fleet revision ${revision} does not validate (${r.problems.length} problem(s); \`llmgw validate --rev ${revision}\` lists them)`);
    return r.spec;
  }

  private async doRefresh(): Promise<RefreshResult> {
    let head: string;
    try {
      head = (await this.repo.sync()).head;
    } catch (e) {
      return this.fail(null, e, 'sync fleet repo');
    }
    if (head === this.lastSeen) {
      this.lastSyncOk = this.now();
      this.lastSyncError = null;
      return { outcome: 'unchanged', head, retries: [], error: null };
    }
    let result: LoadResult;
    let retries: RetryRequest[] = [];
    try {
      result = await this.load(this.repo.files(head), head);
      if (result.ok) retries = extractRetries(await this.commitsSinceApplied(head));
    } catch (e) {
      return this.fail(head, e, `load fleet spec at ${head}`);
    }
    const at = this.now();
    this.lastSyncOk = at;
    this.lastSyncError = null;
    this.lastSeen = head;
    if (!result.ok) {
      this.rejected = { revision: head, problems: result.problems, at };
      await this.loadResumed(head);
      return { outcome: 'rejected', head, retries: [], error: null };
    }
    this.applied = { spec: result.spec, revision: head, warnings: result.warnings, at };
    this.lastApplied = head;
    this.rejected = null;
    return { outcome: 'applied', head, retries, error: null };
  }
}
