/**
 * Thin adapters of the HA controller's published snapshot and state record (src/ha/controller.ts
 * PublishedChannel, StateRecordSource; the reconciler's state store) over the fake etcd, for fast
 * tests of the whole HaController. They do what channel.ts Published and etcd-state.ts
 * EtcdStateStore do with etcd3 — guarded puts by the election, a read then a watch — on one key
 * each; when those move to another layout, these follow.
 */
import type { LoadedEtcdState } from '../../src/ha/etcd-state.js';
import type { PublishedChannel, StateRecordSource } from '../../src/ha/controller.js';
import type { Election } from '../../src/ha/election.js';
import type { StateStore } from '../../src/reconciler/state-store.js';
import { emptyState, stateFromJson, type ControllerState } from '../../src/reconciler/state.js';
import type { FakeEtcdClient } from './fake-etcd.js';

export class FakePublished implements PublishedChannel {
  readonly key: string;
  private last: string | null = null;
  writes = 0;

  constructor(
    private readonly election: Election,
    private readonly client: FakeEtcdClient,
    prefix: string,
  ) {
    this.key = `${prefix}/snapshot`;
  }

  async publish(json: string): Promise<void> {
    if (json === this.last) return;
    await this.election.guardedPut(this.key, json);
    this.last = json;
    this.writes++;
  }

  async watch(onValue: (json: string | null) => void): Promise<() => Promise<void>> {
    const w = this.client.watch(this.key, { put: (kv) => onValue(kv.value), delete: () => onValue(null), error: () => undefined });
    onValue((await this.client.get(this.key)).kv?.value ?? null);
    return () => w.cancel();
  }
}

export class FakeStateRecord implements StateRecordSource, Pick<StateStore, 'save' | 'path'> {
  readonly key: string;
  readonly path: string;

  constructor(
    private readonly election: Election,
    private readonly client: FakeEtcdClient,
    prefix: string,
  ) {
    this.key = `${prefix}/state`;
    this.path = `fake-etcd:${this.key}`;
  }

  async load(): Promise<LoadedEtcdState> {
    const kv = (await this.client.get(this.key)).kv;
    return { state: kv ? stateFromJson(JSON.parse(kv.value)) : emptyState, problem: null };
  }

  async save(state: ControllerState): Promise<boolean> {
    await this.election.guardedPut(this.key, JSON.stringify(state));
    return true;
  }
}
