/**
 * What the controller writes at the end of a pass (I/O): the state record to its store, and the
 * status branch. Neither failure stops the loop; both are shown (state: in status, `ctl status` and
 * logs; the status branch: its last-success time in metrics and status).
 */
import type { Logger } from 'pino';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
import { statusFiles } from '../admin/shape.js';
import type { FleetRepo } from '../git/repo.js';
import { writeStatusBranch } from '../git/status-branch.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { ControllerState } from './state.js';
import type { StateStore } from './state-store.js';
import type { FleetSnapshot } from './view.js';

/** Writes the state record, one write at a time (the latest record wins). */
export class StateSaver {
  private chain: Promise<void> = Promise.resolve();
  /** Why the record is not persisted (or was lost at start), or null. */
  error: ReasonRef | null;

  constructor(
    private readonly store: Pick<StateStore, 'save' | 'path'>,
    private readonly log: Logger,
    initialProblem: ReasonRef | null,
  ) {
    this.error = initialProblem;
    if (initialProblem) log.error({ code: initialProblem.code, path: store.path, reason: initialProblem.message }, 'state file not usable');
  }

  save(current: () => ControllerState): Promise<void> {
    const p = this.chain.then(async () => {
      try {
        await this.store.save(current());
        if (this.error?.code === 'STATE_WRITE_FAILED') {
          this.log.info({ path: this.store.path }, 'state file written again');
          this.error = null;
        }
      } catch (e) {
        const r = reasonOf(e);
        if (this.error?.message !== r.message) this.log.error({ code: r.code, path: this.store.path, reason: r.message }, 'writing the state file failed: parking is not persisted');
        this.error = r;
      }
    });
    this.chain = p;
    return p;
  }
}

/** Writes the status branch when its files changed; remembers when it was last known up to date. */
export class StatusWriter {
  private lastFiles: string | null = null;
  /** Epoch ms the branch was last written or confirmed up to date. */
  lastOk: number | null = null;

  constructor(private readonly repo: FleetRepo) {}

  /**
   * `epoch`: the HA leader's fencing epoch (a Llmgw-Epoch trailer; a newer epoch's head refuses the
   * write). Resolves with STATUS_EPOCH_STALE when a newer epoch wrote the branch, else null.
   */
  async write(snap: FleetSnapshot, spec: FleetSpec, now: () => number, log: Logger, epoch?: number): Promise<ReasonRef | null> {
    const files = statusFiles(snap, spec);
    const key = JSON.stringify(files);
    try {
      if (key !== this.lastFiles) {
        const r = await writeStatusBranch(this.repo, { branch: spec.settings.statusBranch, files, message: `llmgw status at ${snap.appliedRevision?.slice(0, 12) ?? 'no revision'}`, ...(epoch ? { epoch } : {}) });
        this.lastFiles = key;
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
}
