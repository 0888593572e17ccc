/**
 * The state record in etcd (with --etcd, instead of the state file): one key, `<prefix>/state`,
 * holding the record as canonical JSON. Only the leader writes it, each write a txn guarded by its
 * election epoch (a deposed leader's save fails with LEADER_DEPOSED), and only when the record
 * differs from the one last written or read: a pass that changes nothing writes nothing. A value
 * that is not a state record is kept aside (guarded, when this instance leads) and the controller
 * starts from an empty record, as the state file store does.
 */
import type { Etcd3 } from 'etcd3';
import type { ReasonRef } from '../errors/catalogue.js';
import { emptyState, stateFromJson, type ControllerState } from '../reconciler/state.js';
import { canonicalJson } from './canonical-json.js';
import type { Election } from './election.js';
import { etcdError } from './etcd.js';

export interface LoadedEtcdState {
  readonly state: ControllerState;
  /** Why the stored value was not used, or null. */
  readonly problem: ReasonRef | null;
}

export class EtcdStateStore {
  readonly key: string;
  readonly path: string;
  private last: string | null = null;
  private writeCount = 0;

  constructor(
    private readonly election: Election,
    private readonly client: Etcd3,
    private readonly prefix: string,
    private readonly now: () => number = Date.now,
  ) {
    this.key = `${prefix}/state`;
    this.path = `etcd:${this.key}`;
  }

  /** Writes made so far (saves that changed nothing do not count). */
  get writes(): number {
    return this.writeCount;
  }

  /** Reads the record (a missing key: the empty record). Throws ETCD_* when etcd does not answer. */
  async load(): Promise<LoadedEtcdState> {
    let text: string | null;
    try {
      text = await this.client.get(this.key).string();
    } catch (e) {
      throw etcdError(e, `reading the state record ${this.path}`);
    }
    if (text === null) {
      this.last = null;
      return { state: emptyState, problem: null };
    }
    try {
      const state = stateFromJson(JSON.parse(text));
      this.last = canonicalJson(state);
      return { state, problem: null };
    } catch (e) {
      this.last = null;
      const aside = `${this.key}.corrupt-${this.now()}`;
      let kept: string;
      try {
        await this.election.guardedPut(aside, text);
        kept = `kept aside at ${aside}`;
      } catch (err) {
        kept = `not kept aside (${etcdError(err, 'keeping it').message})`;
      }
      return {
        state: emptyState,
        problem: { code: 'ETCD_STATE_CORRUPT', message: `the state record at ${this.path} is not an llmgw state record (${(e as Error).message}); ${kept}; starting from an empty record (failure counts and parking are lost)` },
      };
    }
  }

  /** Writes when the record differs from the last one written or read; returns whether it wrote. */
  async save(state: ControllerState): Promise<boolean> {
    const text = canonicalJson(state);
    if (text === this.last) return false;
    await this.election.guardedPut(this.key, text);
    this.last = text;
    this.writeCount++;
    return true;
  }
}
