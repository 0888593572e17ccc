/**
 * A document in etcd as one key per entry (the I/O around keyed-layout.ts): the leader's writes,
 * as diffs in guarded txns under etcd's limits, and a consistent read (one range read at one
 * revision, in pages, again at the head's revision if it caught a save half-way).
 */
import type { Etcd3 } from 'etcd3';
import type { Election, WriteOp } from './election.js';
import { etcdError } from './etcd.js';
import type { ReasonRef } from '../errors/catalogue.js';
import { batchDiff, diffEntries, ETCD_LIMITS, fitOversized, HEAD, headValue, isEmptyDiff, readKeyed, txnBytes, type Entries, type EntryCut, type EtcdLimits, type KeyedRead, type StoredKv } from './keyed-layout.js';

/** Keys per page of a range read (each answer stays well under gRPC's 4 MiB message limit). */
const PAGE_KEYS = 2_000;

export interface DocRead {
  /** The last complete save's entries; null when none was ever completed. */
  readonly view: Entries | null;
  /** Every entry there now (the next write's diff starts from it). */
  readonly present: Entries;
  /** The head's value now (null: none). */
  readonly headText: string | null;
  /** The revision `view` is at. */
  readonly revision: number;
  /** The mod revision of the head of the save `view` is (null: no complete save): what a router routing from it has applied. */
  readonly headRevision: number | null;
  /** Why the view is not a complete save (the head unreadable; half-way and compacted). */
  readonly problem: string | null;
}

/** The keys under `<base>/` at one revision (0: now), in pages. */
export async function rangeAll(client: Etcd3, base: string, revision: number): Promise<{ kvs: StoredKv[]; revision: number }> {
  const end = Buffer.from(`${base}0`); // '0' follows '/': the end of the prefix
  let from = Buffer.from(`${base}/`);
  let at = revision;
  const kvs: StoredKv[] = [];
  for (;;) {
    const res = await client.kv.range({ key: from, range_end: end, limit: PAGE_KEYS, ...(at > 0 ? { revision: at } : {}) });
    if (at === 0) at = Number(res.header.revision); // the next pages at the first one's revision
    for (const kv of res.kvs) kvs.push({ key: kv.key.toString('utf8'), value: kv.value.toString('utf8'), modRevision: Number(kv.mod_revision) });
    const last = res.kvs[res.kvs.length - 1];
    if (!res.more || !last) break;
    from = Buffer.concat([last.key, Buffer.from([0])]);
  }
  return { kvs, revision: at };
}

/** Reads the document under `base`: the last complete save. Throws ETCD_* when etcd does not answer. */
export async function readDoc(client: Etcd3, base: string): Promise<DocRead> {
  let now: { kvs: StoredKv[]; revision: number };
  try {
    now = await rangeAll(client, base, 0);
  } catch (e) {
    throw etcdError(e, `reading ${base}/`);
  }
  const r: KeyedRead = readKeyed(now.kvs, base);
  if (!r.head) return { view: null, present: r.present, headText: r.headText, revision: now.revision, headRevision: null, problem: null };
  if (r.complete) return { view: r.present, present: r.present, headText: r.headText, revision: now.revision, headRevision: r.headRevision, problem: null };
  if (r.rereadAt === null) return { view: null, present: r.present, headText: r.headText, revision: now.revision, headRevision: null, problem: r.problem };
  // A save caught half-way: the head's revision holds the last complete one.
  try {
    const then = await rangeAll(client, base, r.rereadAt);
    const t = readKeyed(then.kvs, base);
    if (t.complete) return { view: t.present, present: r.present, headText: r.headText, revision: r.rereadAt, headRevision: t.headRevision, problem: null };
  } catch (e) {
    const err = etcdError(e, `reading ${base}/ at revision ${r.rereadAt}`);
    if (err.code === 'ETCD_UNAVAILABLE') throw err;
  }
  return { view: r.present, present: r.present, headText: r.headText, revision: now.revision, headRevision: r.headRevision, problem: `a save under ${base}/ was left half-way and etcd has compacted the revision of the last complete one: using what is there (entries of two consecutive saves)` };
}

export interface DocWriteStats {
  /** Saves that wrote something. */
  readonly writes: number;
  readonly txns: number;
  /** Bytes of keys and values sent in all txns. */
  readonly bytes: number;
  /** Bytes of keys and values of the largest txn sent. */
  readonly largestTxnBytes: number;
  readonly largestTxnOps: number;
}

/** The leader's writer of one document: what etcd holds is known (read, then every txn it made). */
export class DocWriter {
  private known: Map<string, string> | null = null;
  /** The leader epoch `known` was read or written under: another term's leader may have written since. */
  private knownEpoch: number | null = null;
  private s = { writes: 0, txns: 0, bytes: 0, largestTxnBytes: 0, largestTxnOps: 0 };

  constructor(
    private readonly election: Election,
    private readonly client: Etcd3,
    readonly base: string,
    private readonly limits: EtcdLimits = ETCD_LIMITS,
  ) {}

  get stats(): DocWriteStats {
    return { ...this.s };
  }

  /** What etcd holds under the base (from a read): the next write is a diff against it. */
  setKnown(read: Pick<DocRead, 'present' | 'headText'> | null): void {
    this.known = read ? new Map(read.present) : null;
    this.knownEpoch = this.election.epoch;
    if (read?.headText != null) this.known!.set(HEAD, read.headText);
  }

  /**
   * Called with ETCD_VALUE_TRUNCATED when a write cut an entry that would pass etcd's limit (one
   * call per write that cut; the same cut again, pass after pass, is called again).
   */
  onCut: ((r: ReasonRef) => void) | null = null;

  /**
   * Writes what differs from what etcd holds (reading it first when unknown), the head last, with
   * `tail` (deletes of legacy keys) in the last txn. An entry that would pass the limit is cut to
   * fit (fitOversized, told to onCut), never refused; LEADER_DEPOSED when a guard fails (what landed
   * before stays known). Returns whether it wrote.
   */
  async write(next: Entries, what: string, tail: readonly WriteOp[] = []): Promise<boolean> {
    if (!this.known || this.knownEpoch === null || this.knownEpoch !== this.election.epoch) this.setKnown(await readDoc(this.client, this.base));
    const known = this.known!;
    const diff = diffEntries(known, next);
    const headKnown = known.get(HEAD);
    const fit = fitOversized(diff.puts, known, this.base, this.limits);
    if (fit.cuts.length > 0) this.onCut?.(cutReason(what, this.base, fit.cuts));
    const head = headValue(next.size - fit.leftOutNew);
    // the head is an entry of `known` only as read: compare it apart
    const d = { puts: fit.puts, deletes: diff.deletes.filter((k) => k !== HEAD) };
    if (isEmptyDiff(d) && headKnown === head && tail.length === 0) return false;
    for (const batch of batchDiff(d, this.base, [{ put: `${this.base}/${HEAD}`, value: head }, ...tail], this.limits)) {
      try {
        await this.election.guardedTxn(batch, [], what);
      } catch (e) {
        this.known = null; // a txn that timed out may have landed: read again before the next diff
        throw e;
      }
      this.s.txns++;
      this.s.bytes += txnBytes(batch);
      this.s.largestTxnBytes = Math.max(this.s.largestTxnBytes, txnBytes(batch));
      this.s.largestTxnOps = Math.max(this.s.largestTxnOps, batch.length);
      for (const op of batch) {
        const k = 'put' in op ? op.put : op.delete;
        if (!k.startsWith(`${this.base}/`)) continue;
        const name = k.slice(this.base.length + 1);
        if ('put' in op) known.set(name, op.value);
        else known.delete(name);
      }
    }
    this.s.writes++;
    return true;
  }
}

/** What a write that cut entries says (ETCD_VALUE_TRUNCATED): which, from how many bytes to how many. */
export function cutReason(what: string, base: string, cuts: readonly EntryCut[]): ReasonRef {
  const each = cuts.slice(0, 5).map((c) => `${base}/${c.entry} (${c.bytes} bytes ${c.written === null ? 'left as it was: it does not fit even cut' : `cut to ${c.written}`})`);
  const more = cuts.length > 5 ? ` and ${cuts.length - 5} more` : '';
  return { code: 'ETCD_VALUE_TRUNCATED', message: `${what}: ${each.join(', ')}${more}: past the size of one etcd value; the rest was written` };
}
