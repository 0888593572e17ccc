/**
 * The leader's published snapshot in etcd (see channel.ts for what the leader and the standbys
 * exchange).
 *
 * Shell: its watches run on the timers it is given; it reads no clock.
 */
import type { Etcd3, IKeyValue } from 'etcd3';
import { reasonOf, type ReasonRef } from '../errors/catalogue.js';
import { nodeTimers } from '../reconciler/loop.js';
import { cancelWatcher, type Election } from './election.js';
import { CANCEL_TIMEOUT_MS } from './etcd-requests-io.js';
import { applyChanges, ETCD_LIMITS, HEAD, type EtcdLimits } from './keyed-layout.js';
import { DocWriter, readDoc, type DocWriteStats } from './keyed-store.js';
import { lookAndWatch, watchKey } from './look-and-watch.js';
import { parsePublished, publishedEntries, publishedFromEntries, type EntryCache, type PublishedSnapshot } from './published.js';
import type { LoopTimers } from './shell-time.js';

/**
 * The leader's published snapshot, one key per model and node under `<prefix>/published/`
 * (keyed-layout.ts: diffs in guarded txns under etcd's limits, the head last). Every instance
 * watches it: one consistent range read, then the watch's changes, applied a whole save at a time
 * (when its head arrives), so a standby never routes from half of one save and half of another.
 *
 * The layout before it was one value at `<prefix>/snapshot`: a leader deletes it with its first
 * publish; a watcher reads it while no per-key snapshot exists (a leader of the old version).
 */
export class Published {
  readonly base: string;
  readonly legacyKey: string;
  private readonly writer: DocWriter;
  private legacyDeleted = false;
  /** The snapshot to write next (the latest handed in), and the write running now. */
  private next: PublishedSnapshot | null = null;
  private writing: Promise<void> | null = null;
  private lastErrorValue: ReasonRef | null = null;

  constructor(
    election: Election,
    private readonly client: Etcd3,
    prefix: string,
    private readonly timers: LoopTimers = nodeTimers,
    limits: EtcdLimits = ETCD_LIMITS,
  ) {
    this.base = `${prefix}/published`;
    this.legacyKey = `${prefix}/snapshot`;
    this.writer = new DocWriter(election, client, this.base, limits);
  }

  get writes(): number {
    return this.writer.stats.writes;
  }

  get stats(): DocWriteStats {
    return this.writer.stats;
  }

  /** Called with ETCD_VALUE_TRUNCATED when a publish cut an entry past etcd's limit. */
  set onCut(fn: ((r: ReasonRef) => void) | null) {
    this.writer.onCut = fn;
  }

  /** Why the last publish failed (LEADER_DEPOSED, ETCD_*), null after one that did not. */
  get lastError(): ReasonRef | null {
    return this.lastErrorValue;
  }

  /**
   * Guarded txns of what changed since the last publish (nothing when nothing did). One write at a
   * time, the latest snapshot wins: one handed in while another is written waits for it and then
   * replaces any that waited before it (writes side by side would each diff from, or at a new term
   * each re-read, the whole document: at 10,000 models a burst of snapshots overran etcd's deadline).
   * Resolves once a snapshot at least as new as `p` is written; rejects when the last one tried failed.
   */
  publish(p: PublishedSnapshot): Promise<void> {
    this.next = p;
    this.writing ??= this.writeLatest();
    return this.writing;
  }

  private async writeLatest(): Promise<void> {
    try {
      for (let p = this.next; p !== null; p = this.next) {
        this.next = null;
        try {
          await this.writeOne(p);
        } catch (e) {
          if (this.next === null) throw e; // a newer snapshot waits: it is written instead, and says how that went
        }
      }
    } finally {
      this.writing = null; // in the turn the loop ended: a snapshot handed in later starts a new write
    }
  }

  private async writeOne(p: PublishedSnapshot): Promise<void> {
    try {
      await this.writer.write(publishedEntries(p), 'publishing the fleet snapshot', this.legacyDeleted ? [] : [{ delete: this.legacyKey }]);
      this.legacyDeleted = true;
      this.lastErrorValue = null;
    } catch (e) {
      const r = reasonOf(e);
      this.lastErrorValue = { code: r.code, message: r.message };
      throw e;
    }
  }

  /**
   * Calls onValue with the current snapshot (null: none; `problem`: entries or a value this version
   * does not read) and its revision (the mod revision of the head of its save; null: none, or the
   * legacy single key), then after every complete save; resolves to a closer.
   */
  async watch(onValue: (p: PublishedSnapshot | null, problem: string | null, revision: number | null) => void): Promise<() => Promise<void>> {
    let entries: Map<string, string> | null = null;
    const pending = new Map<string, string | null>();
    const cache: EntryCache = new Map();
    let legacy: { readonly p: PublishedSnapshot | null; readonly text: string } | null = null;
    let revision: number | null = null;
    const emit = (): void => {
      if (entries) {
        const { snapshot, bad } = publishedFromEntries(entries, cache);
        onValue(snapshot, snapshot === null ? `the published snapshot under ${this.base}/ is not one this version reads` : bad.length > 0 ? `published entries this version does not read (left out): ${bad.slice(0, 5).join(', ')}` : null, revision);
      } else if (legacy) onValue(legacy.p, legacy.p ? null : `the published snapshot at ${this.legacyKey} is not one this version reads`, null);
      else onValue(null, null, null);
    };
    const prefix = `${this.base}/`;
    const closeNew = await lookAndWatch(`reading ${prefix}`, this.timers, async (closed, ended) => {
      const r = await readDoc(this.client, this.base);
      if (closed()) return null;
      // `raw`: the entries as of the read, then with each whole save applied; the view only once a save is whole
      let raw = new Map(r.view ?? r.present);
      entries = r.view ? raw : null;
      revision = r.view ? r.headRevision : null;
      pending.clear();
      emit();
      const w = this.client.watch().prefix(prefix).startRevision(String(r.revision + 1)).watcher();
      w.on('put', (kv: IKeyValue) => {
        const name = kv.key.toString('utf8').slice(prefix.length);
        if (name !== HEAD) return void pending.set(name, kv.value.toString('utf8'));
        raw = applyChanges(raw, pending);
        entries = raw;
        revision = Number(kv.mod_revision);
        pending.clear();
        emit();
      });
      w.on('delete', (kv: IKeyValue) => {
        const name = kv.key.toString('utf8').slice(prefix.length);
        if (name !== HEAD) return void pending.set(name, null);
        entries = null;
        revision = null;
        emit();
      });
      // ended by etcd: etcd3 has dropped this watcher already; cancelling it again would make it throw on the stream
      let over = false;
      w.on('error', () => {
        over = true;
        ended();
      });
      return { cancel: () => (over ? Promise.resolve() : cancelWatcher(w, CANCEL_TIMEOUT_MS, this.timers)) };
    });
    let closeLegacy: () => Promise<void>;
    try {
      closeLegacy = await watchKey(this.client, this.legacyKey, this.timers, (v) => {
        legacy = v === null ? null : { p: parsePublished(v), text: v };
        if (!entries) emit();
      });
    } catch (e) {
      await closeNew();
      throw e;
    }
    return async () => {
      await Promise.all([closeNew(), closeLegacy()]);
    };
  }
}
