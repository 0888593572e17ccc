/**
 * A document stored in etcd as one key per entry under a base (pure): `<base>/<entry>` for each
 * entry and `<base>/head` written last. What the state record and the published snapshot share:
 *
 * - Writes are diffs: only entries whose value changed are put, only entries gone are deleted; an
 *   unchanged document writes nothing.
 * - A diff is cut into batches that each stay under etcd's request limits (--max-request-bytes,
 *   1.5 MiB by default, and --max-txn-ops, 128): each batch is one guarded txn. The head rides in the
 *   last batch, so a small diff (the usual pass) is one atomic txn.
 * - The head names how many entries the document holds. A reader relies on it for a consistent view:
 *   every entry a save puts has a modRevision at or below its head's, and the count matches; a range
 *   read that finds otherwise caught a save half-way (or a leader that died half-way), and reads again
 *   at the head's revision, where the last complete save is whole. A watcher buffers the events
 *   between heads and applies them when the head arrives. So no reader ever sees a mix of two saves.
 * - An entry whose value alone would pass the limit is cut to fit, never refused: its longest strings
 *   end in "… (N bytes cut)" (fitOversized). One entry's size never stops the rest of a save.
 */
import { reasonText } from '../errors/catalogue.js';
import type { WriteOp } from './etcd-leader-io.js';

/** Entry name (relative to the base, e.g. `models/<name>`) → its value. */
export type Entries = ReadonlyMap<string, string>;

export interface EtcdLimits {
  /** Bytes of keys and values in one txn (etcd's default request limit is 1.5 MiB; this leaves room). */
  readonly maxTxnBytes: number;
  /** Writes in one txn, the head included (etcd's default --max-txn-ops is 128). */
  readonly maxTxnOps: number;
  /** One value: larger ones are cut to fit (fitOversized). */
  readonly maxValueBytes: number;
}

/** Per op, what a txn costs beyond its key and value (protobuf framing, a generous guess). */
const OP_OVERHEAD_BYTES = 32;

export const ETCD_LIMITS: EtcdLimits = Object.freeze({ maxTxnBytes: 1024 * 1024, maxTxnOps: 120, maxValueBytes: 512 * 1024 });

export const HEAD = 'head';

export interface EntryDiff {
  readonly puts: ReadonlyArray<readonly [string, string]>;
  readonly deletes: readonly string[];
}

/** What changes from `prev` to `next` (puts in entry order, then the deletes). */
export function diffEntries(prev: Entries, next: Entries): EntryDiff {
  const puts: Array<readonly [string, string]> = [];
  for (const [k, v] of next) if (prev.get(k) !== v) puts.push([k, v]);
  const deletes = [...prev.keys()].filter((k) => !next.has(k));
  return { puts, deletes };
}

export function isEmptyDiff(d: EntryDiff): boolean {
  return d.puts.length === 0 && d.deletes.length === 0;
}

/** An entry name as a key segment: model names and replica ids are spec names, but `/` and `%` are escaped anyway. */
export function keyPart(name: string): string {
  return name.replace(/[%/]/g, (c) => (c === '%' ? '%25' : '%2F'));
}

export function nameOfPart(part: string): string {
  return part.replace(/%2F|%25/g, (c) => (c === '%2F' ? '/' : '%'));
}

function opBytes(key: string, value: string): number {
  return Buffer.byteLength(key) + Buffer.byteLength(value) + OP_OVERHEAD_BYTES;
}

/** The most bytes an entry's value may have under `base` (one value, and one op alone in a txn). */
function valueRoom(base: string, entry: string, limits: EtcdLimits): number {
  return Math.min(limits.maxValueBytes, limits.maxTxnBytes - OP_OVERHEAD_BYTES - Buffer.byteLength(`${base}/${entry}`));
}

/** The caps shrinkJson tries on a value's strings, longest first. */
const STRING_CAPS = [64 * 1024, 8 * 1024, 1024, 256, 64] as const;

function capStrings(v: unknown, cap: number): unknown {
  if (typeof v === 'string') return reasonText(v, cap);
  if (Array.isArray(v)) return v.map((x) => capStrings(x, cap));
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = capStrings(x, cap);
    return out;
  }
  return v;
}

/**
 * A JSON value's text with its strings cut ("… (N bytes cut)") until it is at most `maxBytes`: the
 * least cut that fits, its keys in their order (a canonical entry stays canonical). null: the text is
 * not JSON, or it does not fit even with every string at 64 bytes.
 */
export function shrinkJson(text: string, maxBytes: number): string | null {
  let v: unknown;
  try {
    v = JSON.parse(text) as unknown;
  } catch {
    return null;
  }
  for (const cap of STRING_CAPS) {
    const out = JSON.stringify(capStrings(v, cap));
    if (Buffer.byteLength(out) <= maxBytes) return out;
  }
  return null;
}

/** An entry that passed the limit: `bytes` it had; what was written instead (`bytes` of it), or null: left as it was. */
export interface EntryCut {
  readonly entry: string;
  readonly bytes: number;
  readonly written: number | null;
}

/**
 * A diff's puts with every value that would pass the limit cut to fit (shrinkJson). One that cannot
 * be cut is left out: the entry keeps what etcd holds, and a new one is not written (`leftOutNew`:
 * how many, so the head counts what is there). A cut equal to what etcd holds is not put again.
 */
export function fitOversized(
  puts: ReadonlyArray<readonly [string, string]>, known: Entries, base: string, limits: EtcdLimits = ETCD_LIMITS,
): { puts: Array<readonly [string, string]>; cuts: EntryCut[]; leftOutNew: number } {
  const out: Array<readonly [string, string]> = [];
  const cuts: EntryCut[] = [];
  let leftOutNew = 0;
  for (const [k, v] of puts) {
    const room = valueRoom(base, k, limits);
    // a UTF-16 unit is at most 3 bytes
    if (v.length * 3 <= room || Buffer.byteLength(v) <= room) {
      out.push([k, v]);
      continue;
    }
    const fitted = shrinkJson(v, room);
    cuts.push({ entry: k, bytes: Buffer.byteLength(v), written: fitted === null ? null : Buffer.byteLength(fitted) });
    if (fitted === null) {
      if (!known.has(k)) leftOutNew++;
    } else if (known.get(k) !== fitted) out.push([k, fitted]);
  }
  return { puts: out, cuts, leftOutNew };
}

/**
 * The txns of a diff, in order: deletes and puts in batches of at most maxTxnOps writes and
 * maxTxnBytes, `tail` ops (the head, a legacy key's delete) in the last one (a batch of their own
 * when the last is full). Keys are absolute (`base/entry`). Assumes fitOversized's puts.
 */
export function batchDiff(d: EntryDiff, base: string, tail: readonly WriteOp[], limits: EtcdLimits = ETCD_LIMITS): WriteOp[][] {
  const batches: WriteOp[][] = [];
  let cur: WriteOp[] = [];
  let bytes = 0;
  const add = (op: WriteOp, b: number): void => {
    if (cur.length > 0 && (cur.length + 1 > limits.maxTxnOps || bytes + b > limits.maxTxnBytes)) {
      batches.push(cur);
      cur = [];
      bytes = 0;
    }
    cur.push(op);
    bytes += b;
  };
  for (const k of d.deletes) add({ delete: `${base}/${k}` }, opBytes(`${base}/${k}`, ''));
  for (const [k, v] of d.puts) add({ put: `${base}/${k}`, value: v }, opBytes(`${base}/${k}`, v));
  const tailBytes = tail.reduce((n, op) => n + ('put' in op ? opBytes(op.put, op.value) : opBytes(op.delete, '')), 0);
  if (cur.length > 0 && (cur.length + tail.length > limits.maxTxnOps || bytes + tailBytes > limits.maxTxnBytes)) {
    batches.push(cur);
    cur = [];
  }
  cur.push(...tail);
  if (cur.length > 0) batches.push(cur);
  return batches;
}

/** The bytes of keys and values a txn carries (what the tests hold under the limit). */
export function txnBytes(ops: readonly WriteOp[]): number {
  return ops.reduce((n, op) => n + ('put' in op ? opBytes(op.put, op.value) : opBytes(op.delete, '')), 0);
}

/** The head's value: the document's format and how many entries it holds. */
export function headValue(entries: number): string {
  return JSON.stringify({ v: 1, entries });
}

export function parseHead(text: string): { readonly entries: number } | null {
  try {
    const v = JSON.parse(text) as { v?: unknown; entries?: unknown } | null;
    return v && v.v === 1 && Number.isSafeInteger(v.entries) && (v.entries as number) >= 0 ? { entries: v.entries as number } : null;
  } catch {
    return null;
  }
}

/** One key as a range read gives it (revision as a number). */
export interface StoredKv {
  readonly key: string;
  readonly value: string;
  readonly modRevision: number;
}

/**
 * What a range read of `<base>/` holds: `present` (every entry there now, what the next diff starts
 * from) and, when a complete save is there, its entries. `rereadAt`: a save was caught half-way (an
 * entry newer than the head, or the count differs): read again at that revision, the head's, for the
 * last complete one. `head: false`: no complete save was ever written here.
 */
export interface KeyedRead {
  readonly present: Entries;
  /** The head's value as it is now (null: none). */
  readonly headText: string | null;
  readonly head: boolean;
  /** The head's mod revision (null: no head): the revision of the save it ends, the same for every reader. */
  readonly headRevision: number | null;
  readonly complete: boolean;
  readonly rereadAt: number | null;
  readonly problem: string | null;
}

export function readKeyed(kvs: readonly StoredKv[], base: string): KeyedRead {
  const present = new Map<string, string>();
  let head: StoredKv | null = null;
  let newest = 0;
  for (const kv of kvs) {
    if (!kv.key.startsWith(`${base}/`)) continue;
    const name = kv.key.slice(base.length + 1);
    if (name === HEAD) head = kv;
    else {
      present.set(name, kv.value);
      newest = Math.max(newest, kv.modRevision);
    }
  }
  if (!head) return { present, headText: null, head: false, headRevision: null, complete: false, rereadAt: null, problem: null };
  const h = parseHead(head.value);
  if (!h) return { present, headText: head.value, head: true, headRevision: head.modRevision, complete: false, rereadAt: null, problem: `its head ${base}/${HEAD} is not one this version reads` };
  const complete = newest <= head.modRevision && h.entries === present.size;
  return { present, headText: head.value, head: true, headRevision: head.modRevision, complete, rereadAt: complete ? null : head.modRevision, problem: null };
}

/** `entries` with a watch's buffered changes applied (null: deleted). */
export function applyChanges(entries: Entries, changes: ReadonlyMap<string, string | null>): Map<string, string> {
  const out = new Map(entries);
  for (const [k, v] of changes) {
    if (v === null) out.delete(k);
    else out.set(k, v);
  }
  return out;
}

/** Entries under a group (`models/`), by the name after it. */
export function group(entries: Entries, prefix: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [k, v] of entries) if (k.startsWith(prefix)) out.push([nameOfPart(k.slice(prefix.length)), v]);
  return out;
}
