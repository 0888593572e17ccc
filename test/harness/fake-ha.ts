/**
 * Thin adapters of the HA controller's published snapshot and state record (src/ha/controller.ts
 * PublishedChannel, StateRecordSource; the reconciler's state store) over the fake etcd, for fast
 * tests of the whole HaController. They do what channel.ts Published and etcd-state.ts
 * EtcdStateStore do with etcd3 — guarded writes by the election, a read then a watch — but on one
 * key each (the real ones keep a key per model: keyed-layout.ts, tested on real etcd in etcd-scale).
 */
import type { LoadedEtcdState } from '../../src/ha/etcd-state.js';
import type { PublishedChannel, StateRecordSource } from '../../src/ha/controller.js';
import type { Election } from '../../src/ha/election.js';
import { parsePublished, type PublishedSnapshot } from '../../src/ha/published.js';
import type { StateStore } from '../../src/reconciler/state-store.js';
import { emptyState, type ControllerState } from '../../src/reconciler/state.js';
import { stateFromJson } from '../../src/reconciler/state-migrate.js';
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

  async publish(p: PublishedSnapshot): Promise<void> {
    const json = JSON.stringify(p);
    if (json === this.last) return;
    await this.election.guardedPut(this.key, json);
    this.last = json;
    this.writes++;
  }

  async watch(onValue: (p: PublishedSnapshot | null, problem: string | null, revision: number | null) => void): Promise<() => Promise<void>> {
    const seen = (json: string | null, revision: number | null): void => {
      const p = json === null ? null : parsePublished(json);
      onValue(p, json !== null && p === null ? `the published snapshot at ${this.key} is not one this version reads` : null, revision);
    };
    const w = this.client.watch(this.key, { put: (kv) => seen(kv.value, kv.modRevision), delete: () => seen(null, null), error: () => undefined });
    const now = (await this.client.get(this.key)).kv;
    seen(now?.value ?? null, now?.modRevision ?? null);
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
