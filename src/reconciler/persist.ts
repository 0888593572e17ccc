/**
 * What the controller writes at the end of a pass (I/O): the state record to its store, and the
 * status branch. Neither failure stops the loop; both are shown (state: in status, `ctl status` and
 * logs; the status branch: its last-success time in metrics and status).
 */
import type { Logger } from 'pino';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
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

/**
 * Where the status of a pass goes (the status branch, written by `serve/status-writer.ts`; the
 * composition root injects it, so the reconciler does not know the wire format or git).
 */
export interface StatusSink {
  /** Epoch ms the status was last written or confirmed up to date. */
  readonly lastOk: number | null;
  /** A forged epoch on the status branch, passed over (STATUS_EPOCH_FORGED), while it is there. */
  readonly forged?: ReasonRef | null;
  /** Resolves with STATUS_EPOCH_STALE when a newer epoch wrote the status, else null. */
  write(snap: FleetSnapshot, spec: FleetSpec, now: () => number, log: Logger, epoch?: number): Promise<ReasonRef | null>;
}
