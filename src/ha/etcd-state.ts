/**
 * The state record in etcd (with --etcd, instead of the state file): one key per model and replica
 * under `<prefix>/state/` (state-layout.ts), written as diffs in guarded txns under etcd's limits
 * with the head last (keyed-layout.ts). Only the leader writes it, each txn guarded by its election
 * epoch (a deposed leader's save fails with LEADER_DEPOSED), and only what differs from what etcd
 * holds: a pass that changes nothing writes nothing, one that changes one model writes its entry.
 * A new leader reads it with one range read (at the revision of the last complete save: a leader
 * that died half-way through a save left nothing half-read). An entry that would pass etcd's limit
 * is cut to fit (keyed-layout.ts fitOversized; told to onCut) and the rest of the save is written.
 *
 * Before this layout the record was one value at `<prefix>/state`: a leader that finds it (and no
 * per-key record) reads it, writes the per-key record and deletes it in the last txn of that write.
 * A record that is not a state record is kept aside (guarded, when this instance leads) and the
 * controller starts from an empty record, as the state file store does.
 */
import type { Etcd3 } from 'etcd3';
import { isLlmgwError, LlmgwError, type ReasonRef } from '../errors/catalogue.js';
import { emptyState, type ControllerState } from '../reconciler/state.js';
import { stateFromJson } from '../reconciler/state-migrate.js';
import type { Election, WriteOp } from './election.js';
import { etcdError } from './etcd.js';
import { ETCD_LIMITS, type EtcdLimits } from './keyed-layout.js';
import { DocWriter, readDoc, type DocWriteStats } from './keyed-store.js';
import { stateEntries, stateFromEntries } from './state-layout.js';

export interface LoadedEtcdState {
  readonly state: ControllerState;
  /** Why the stored value was not used, or null. */
  readonly problem: ReasonRef | null;
}

export class EtcdStateStore {
  /** The key of the layout before this one (one value), migrated and deleted by a leader. */
  readonly legacyKey: string;
  readonly base: string;
  readonly path: string;
  private readonly writer: DocWriter;
  private legacyPending = false;

  constructor(
    private readonly election: Election,
    private readonly client: Etcd3,
    private readonly prefix: string,
    private readonly now: () => number = Date.now,
    limits: EtcdLimits = ETCD_LIMITS,
  ) {
    this.legacyKey = `${prefix}/state`;
    this.base = `${prefix}/state`;
    this.path = `etcd:${this.base}/`;
    this.writer = new DocWriter(election, client, this.base, limits);
  }

  /** Writes made so far (saves that changed nothing do not count). */
  get writes(): number {
    return this.writer.stats.writes;
  }

  get stats(): DocWriteStats {
    return this.writer.stats;
  }

  /** Reads the record (none: the empty record). Throws ETCD_* when etcd does not answer. */
  async load(): Promise<LoadedEtcdState> {
    const read = await readDoc(this.client, this.base);
    this.writer.setKnown(read);
    if (read.view) {
      try {
        const state = stateFromEntries(read.view);
        return { state, problem: read.problem ? { code: 'ETCD_STATE_CORRUPT', message: `the state record at ${this.path}: ${read.problem}` } : null };
      } catch (e) {
        // a newer llmgw's record: never kept aside and written over (the caller stands by)
        if (isLlmgwError(e, 'STATE_VERSION_NEWER')) throw new LlmgwError('STATE_VERSION_NEWER', `the state record at ${this.path}: ${e.message}`, { ...e.detail });
        return this.corrupt(JSON.stringify(Object.fromEntries(read.view)), (e as Error).message);
      }
    }
    if (read.problem) return this.corrupt(JSON.stringify(Object.fromEntries(read.present)), read.problem);
    return this.loadLegacy();
  }

  /** No per-key record: the one-value record of the layout before, migrated now when there is one. */
  private async loadLegacy(): Promise<LoadedEtcdState> {
    let text: string | null;
    try {
      text = await this.client.get(this.legacyKey).string();
    } catch (e) {
      throw etcdError(e, `reading the state record ${this.legacyKey}`);
    }
    if (text === null) return { state: emptyState, problem: null };
    this.legacyPending = true;
    let state: ControllerState;
    try {
      state = stateFromJson(JSON.parse(text));
    } catch (e) {
      if (isLlmgwError(e, 'STATE_VERSION_NEWER')) throw e;
      return this.corrupt(text, (e as Error).message, `etcd:${this.legacyKey}`);
    }
    // Written now (and the old key deleted with it) when this instance leads; if that fails, the
    // next save tries again (legacyPending stays) and its failure is the saver's (status, log).
    await this.save(state).catch(() => undefined);
    return { state, problem: null };
  }

  private async corrupt(text: string, why: string, at = this.path): Promise<LoadedEtcdState> {
    const aside = `${this.prefix}/state.corrupt-${this.now()}`;
    let kept: string;
    try {
      await this.election.guardedPut(aside, text);
      kept = `kept aside at ${aside}`;
    } catch (err) {
      kept = `not kept aside (${etcdError(err, 'keeping it').message})`;
    }
    return {
      state: emptyState,
      problem: { code: 'ETCD_STATE_CORRUPT', message: `the state record at ${at} is not an llmgw state record (${why}); ${kept}; starting from an empty record (failure counts and parking are lost)` },
    };
  }

  /** Called with ETCD_VALUE_TRUNCATED when a save cut an entry past etcd's limit. */
  set onCut(fn: ((r: ReasonRef) => void) | null) {
    this.writer.onCut = fn;
  }

  /** Writes what differs from what etcd holds; returns whether it wrote. An entry past the limit is cut (onCut). */
  async save(state: ControllerState): Promise<boolean> {
    const tail: WriteOp[] = this.legacyPending ? [{ delete: this.legacyKey }] : [];
    const wrote = await this.writer.write(stateEntries(state), 'saving the state record', tail);
    this.legacyPending = false;
    return wrote;
  }
}
