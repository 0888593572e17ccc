/**
 * The status branch writer: the wire format's status files (`wire/shape.ts`), committed to the
 * fleet repo's status branch when they changed. Injected into the reconciler as its StatusSink.
 */
import type { Logger } from 'pino';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { FleetRepo } from '../git/repo.js';
import { TreeCache, writeStatusBranch } from '../git/status-branch.js';
import type { StatusSink } from '../reconciler/persist.js';
import type { FleetSnapshot } from '../reconciler/view.js';
import { statusFiles } from '../wire/shape.js';
import { sameEntries } from '../util/equal-data.js';

/** Writes the status branch when its files changed; remembers when it was last known up to date. */
export class StatusWriter implements StatusSink {
  /** The files last written (or confirmed written): equal files are not written again. */
  private lastFiles: Readonly<Record<string, string>> | null = null;
  /** Epoch ms the branch was last written or confirmed up to date. */
  lastOk: number | null = null;

  private readonly treeCache: TreeCache;

  /** A forged epoch on the branch, passed over (STATUS_EPOCH_FORGED), while it is there. */
  forged: ReasonRef | null = null;

  /** `epochBound`: HA, the leader's own epoch while it holds the key (else etcd's revision) — an epoch above it on the branch is a forgery and fences nothing. */
  constructor(
    private readonly repo: FleetRepo,
    private readonly epochBound?: () => Promise<number>,
    /** HA: the cluster's status fence key (ha/shared.ts), which signs each commit's Llmgw-Fence summary. */
    private readonly fenceKey?: Buffer,
  ) {
    this.treeCache = new TreeCache(repo.gitdir);
  }

  /**
   * `epoch`: the HA leader's fencing epoch (a Llmgw-Epoch trailer; a newer epoch's head refuses the
   * write). Resolves with STATUS_EPOCH_STALE when a newer epoch wrote the branch, else null.
   */
  async write(snap: FleetSnapshot, spec: FleetSpec, now: () => number, log: Logger, epoch?: number): Promise<ReasonRef | null> {
    const files = statusFiles(snap, spec);
    try {
      // an unchanged model's text is the same string as last time: compared at once
      if (!this.lastFiles || !sameEntries(files, this.lastFiles)) {
        const r = await writeStatusBranch(this.repo, {
          branch: spec.settings.statusBranch,
          files,
          message: `llmgw status at ${snap.appliedRevision?.slice(0, 12) ?? 'no revision'}`,
          ...(epoch ? { epoch } : {}),
          ...(epoch && this.epochBound ? { epochBound: this.epochBound } : {}),
          ...(epoch && this.fenceKey ? { fenceKey: this.fenceKey } : {}),
          treeCache: this.treeCache,
        });
        this.lastFiles = files;
        this.noteForged(r.forged ?? null, log);
        if (r.changed) log.debug({ oid: r.oid }, 'status branch written');
      }
      // Written, or nothing new to write: the branch is confirmed up to date as of now.
      this.lastOk = now();
    } catch (e) {
      const r = reasonOf(e);
      // A newer leader has written the branch: this instance was deposed (the caller steps down).
      if (r.code === 'STATUS_EPOCH_STALE') return r;
      log.warn({ code: r.code, err: r.message }, 'writing the status branch failed; retried next pass');
    }
    return null;
  }

  private noteForged(f: { epoch: number; commit: string; bound: number } | null, log: Logger): void {
    if (f === null) {
      this.forged = null;
      return;
    }
    const message = `status branch commit ${f.commit.slice(0, 12)} carries Llmgw-Epoch ${f.epoch}, above ${f.bound}, the highest real epoch (this leader's own while it holds the leader key, else etcd's revision): no leader of this etcd wrote it (forged, or from before an etcd restore); it fences nothing and this leader writes on`;
    if (this.forged?.message !== message) log.error({ code: 'STATUS_EPOCH_FORGED', commit: f.commit, epoch: f.epoch, bound: f.bound }, 'status branch: a forged epoch, passed over');
    this.forged = { code: 'STATUS_EPOCH_FORGED', message };
  }
}
