/**
 * Object sizes straight from the object store, without inflating whole objects: the size is
 * in a loose object's zlib header ("blob 123\0") or in a pack entry's header (for deltas, in
 * the first bytes of the delta data). isomorphic-git has no way to ask for a size, and
 * reading a 50 MB blob to learn that it is too large is what this avoids.
 */
import { open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { constants as zc, inflateSync } from 'node:zlib';

const MAX_WINDOW = 1 << 20;

async function readAt(path: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await fh.read(buf, 0, length, offset);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

/** Inflate the start of a zlib stream that begins at `offset` until `enough(out)` holds. */
async function inflateHead(path: string, offset: number, enough: (out: Buffer) => boolean): Promise<Buffer> {
  for (let window = 512; window <= MAX_WINDOW; window *= 4) {
    const raw = await readAt(path, offset, window);
    let out: Buffer;
    try {
      out = inflateSync(raw, { finishFlush: zc.Z_SYNC_FLUSH });
    } catch {
      out = Buffer.alloc(0);
    }
    if (enough(out)) return out;
    if (raw.length < window) break;
  }
  throw new Error(`cannot inflate object header in ${path} at ${offset}`);
}

async function looseSize(gitdir: string, oid: string): Promise<number | null> {
  const path = join(gitdir, 'objects', oid.slice(0, 2), oid.slice(2));
  let out: Buffer;
  try {
    out = await inflateHead(path, 0, (b) => b.includes(0));
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw e;
  }
  const header = out.subarray(0, out.indexOf(0)).toString('latin1');
  const m = /^(blob|tree|commit|tag) (\d+)$/.exec(header);
  if (!m) throw new Error(`bad loose object header for ${oid}`);
  return Number(m[2]);
}

interface PackIndex {
  readonly pack: string;
  readonly count: number;
  readonly fanout: Uint32Array;
  readonly data: Buffer;
}

/** Parse a version-2 pack index (what git and isomorphic-git write). Others are skipped. */
function parseIdx(pack: string, data: Buffer): PackIndex | null {
  if (data.length < 8 + 1024 || data.readUInt32BE(0) !== 0xff744f63 || data.readUInt32BE(4) !== 2) return null;
  const fanout = new Uint32Array(256);
  for (let i = 0; i < 256; i++) fanout[i] = data.readUInt32BE(8 + i * 4);
  return { pack, count: fanout[255] ?? 0, fanout, data };
}

function findInIdx(idx: PackIndex, oid: string): number | null {
  const want = Buffer.from(oid, 'hex');
  const first = want[0] ?? 0;
  let lo = first === 0 ? 0 : (idx.fanout[first - 1] ?? 0);
  let hi = idx.fanout[first] ?? 0;
  const shaBase = 8 + 1024;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const cmp = want.compare(idx.data, shaBase + mid * 20, shaBase + mid * 20 + 20);
    if (cmp === 0) {
      const offBase = shaBase + idx.count * 24; // after shas (20n) and crcs (4n)
      const off = idx.data.readUInt32BE(offBase + mid * 4);
      if ((off & 0x80000000) === 0) return off;
      const largeBase = offBase + idx.count * 4;
      return Number(idx.data.readBigUInt64BE(largeBase + (off & 0x7fffffff) * 8));
    }
    if (cmp < 0) hi = mid;
    else lo = mid + 1;
  }
  return null;
}

function readVarint(buf: Buffer, pos: number): { value: number; next: number } {
  let value = 0;
  let mult = 1;
  let p = pos;
  for (;;) {
    const c = buf[p++];
    if (c === undefined) throw new Error('truncated varint');
    value += (c & 0x7f) * mult;
    mult *= 128;
    if ((c & 0x80) === 0) return { value, next: p };
  }
}

async function packedSize(idx: PackIndex, offset: number): Promise<number> {
  const head = await readAt(idx.pack, offset, 64);
  let p = 0;
  let c = head[p++] ?? 0;
  const type = (c >> 4) & 7;
  let size = c & 15;
  let mult = 16;
  while (c & 0x80) {
    c = head[p++] ?? 0;
    size += (c & 0x7f) * mult;
    mult *= 128;
  }
  if (type >= 1 && type <= 4) return size;
  if (type === 6) {
    // OFS_DELTA: a base offset in git's "offset encoding", then zlib data.
    while ((head[p++] ?? 0) & 0x80);
  } else if (type === 7) {
    p += 20; // REF_DELTA: the base's oid
  } else {
    throw new Error(`unknown pack entry type ${type}`);
  }
  // Delta data starts with two varints: the base's size, then the result's size.
  const complete = (b: Buffer): boolean => {
    try {
      readVarint(b, readVarint(b, 0).next);
      return true;
    } catch {
      return false;
    }
  };
  const delta = await inflateHead(idx.pack, offset + p, complete);
  return readVarint(delta, readVarint(delta, 0).next).value;
}

/** Reads object sizes for one gitdir; caches the pack indexes it parsed. */
export class ObjectSizer {
  private packs: Promise<PackIndex[]> | null = null;

  constructor(private readonly gitdir: string) {}

  private async loadPacks(): Promise<PackIndex[]> {
    const dir = join(this.gitdir, 'objects', 'pack');
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      return [];
    }
    const out: PackIndex[] = [];
    for (const name of names.filter((n) => n.endsWith('.idx')).sort()) {
      const fh = await open(join(dir, name), 'r');
      try {
        const idx = parseIdx(join(dir, name.replace(/\.idx$/, '.pack')), await fh.readFile());
        if (idx) out.push(idx);
      } finally {
        await fh.close();
      }
    }
    return out;
  }

  /** Size in bytes of the object, or null when neither a loose object nor a v2-indexed pack holds it. */
  async size(oid: string): Promise<number | null> {
    const loose = await looseSize(this.gitdir, oid);
    if (loose !== null) return loose;
    for (let attempt = 0; attempt < 2; attempt++) {
      this.packs ??= this.loadPacks();
      try {
        for (const idx of await this.packs) {
          const off = findInIdx(idx, oid);
          if (off !== null) return await packedSize(idx, off);
        }
      } catch (e) {
        if (attempt > 0) throw e; // e.g. a pack removed by `git gc` since it was listed
      }
      this.packs = null; // packs may have been added (fetch) or replaced (gc) since: look once more
    }
    return null;
  }
}
