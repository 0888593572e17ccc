/**
 * A small, dependency-free GGUF v3 writer: what the tiny model (tiny-model.ts) and the tests' own
 * GGUF files are written with.
 *
 * Format (ggml/src/gguf.cpp, gguf-py/gguf/gguf_writer.py), all little-endian:
 *   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv
 *   n_kv × (string key, u32 value type, value)       string = u64 byte length + UTF-8 bytes
 *   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)
 *   padding to `general.alignment` (32), then the tensor data, each tensor padded to the alignment;
 *   offsets are relative to the start of the data section and must be exactly the running padded size.
 */

/** GGUF metadata value types (gguf-py GGUFValueType). */
export const GGUF_TYPE = {
  UINT8: 0,
  INT8: 1,
  UINT16: 2,
  INT16: 3,
  UINT32: 4,
  INT32: 5,
  FLOAT32: 6,
  BOOL: 7,
  STRING: 8,
  ARRAY: 9,
  UINT64: 10,
  INT64: 11,
  FLOAT64: 12,
} as const;
export type GgufScalarType = Exclude<(typeof GGUF_TYPE)[keyof typeof GGUF_TYPE], 9>;

/** The ggml tensor types this writer can emit. */
export const GGML_TYPE = { F32: 0, F16: 1 } as const;
export type GgmlType = (typeof GGML_TYPE)[keyof typeof GGML_TYPE];

/** SentencePiece token types (gguf-py TokenType). */
export const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5, BYTE: 6 } as const;

type Scalar = number | bigint | boolean | string;
interface KvEntry {
  key: string;
  type: GgufScalarType | 9;
  itemType?: GgufScalarType;
  value: Scalar | readonly Scalar[];
}
interface TensorEntry {
  name: string;
  /** ggml order: dims[0] is the row length (ne0). */
  dims: number[];
  type: GgmlType;
  data: Buffer;
}

/** `general.alignment` unless set otherwise (gguf.cpp GGUF_DEFAULT_ALIGNMENT). */
export const DEFAULT_ALIGNMENT = 32;

/** Builds a GGUF v3 file in memory. Keys and tensors are written in insertion order (deterministic). */
export class GgufWriter {
  private readonly kvs: KvEntry[] = [];
  private readonly tensors: TensorEntry[] = [];
  private readonly keys = new Set<string>();
  private alignment = DEFAULT_ALIGNMENT;

  private addKv(entry: KvEntry): this {
    if (this.keys.has(entry.key)) throw new Error(`gguf: duplicate key ${entry.key}`);
    this.keys.add(entry.key);
    this.kvs.push(entry);
    return this;
  }

  u32(key: string, v: number): this {
    return this.addKv({ key, type: GGUF_TYPE.UINT32, value: v });
  }
  i32(key: string, v: number): this {
    return this.addKv({ key, type: GGUF_TYPE.INT32, value: v });
  }
  u64(key: string, v: bigint | number): this {
    return this.addKv({ key, type: GGUF_TYPE.UINT64, value: BigInt(v) });
  }
  f32(key: string, v: number): this {
    return this.addKv({ key, type: GGUF_TYPE.FLOAT32, value: v });
  }
  bool(key: string, v: boolean): this {
    return this.addKv({ key, type: GGUF_TYPE.BOOL, value: v });
  }
  string(key: string, v: string): this {
    return this.addKv({ key, type: GGUF_TYPE.STRING, value: v });
  }
  array(key: string, itemType: GgufScalarType, values: readonly Scalar[]): this {
    return this.addKv({ key, type: GGUF_TYPE.ARRAY, itemType, value: values });
  }
  /** `general.alignment` (u32, power of two); also used for the layout of this file. */
  setAlignment(a: number): this {
    if (a <= 0 || (a & (a - 1)) !== 0) throw new Error(`gguf: alignment ${a} is not a power of two`);
    this.alignment = a;
    return this.u32('general.alignment', a);
  }

  /** Adds a tensor. `dims` in ggml order (ne0 = row length first); data is row-major F32 values. */
  tensor(name: string, dims: number[], values: Float32Array, type: GgmlType = GGML_TYPE.F32): this {
    const n = dims.reduce((a, b) => a * b, 1);
    if (values.length !== n) throw new Error(`gguf: tensor ${name} has ${values.length} values, dims say ${n}`);
    if (this.tensors.some((t) => t.name === name)) throw new Error(`gguf: duplicate tensor ${name}`);
    const data = type === GGML_TYPE.F32 ? f32Bytes(values) : f16Bytes(values);
    this.tensors.push({ name, dims: [...dims], type, data });
    return this;
  }

  /** Serializes the whole file. */
  toBuffer(): Buffer {
    const w = new ByteWriter();
    w.bytes(Buffer.from('GGUF', 'latin1'));
    w.u32(3);
    w.u64(BigInt(this.tensors.length));
    w.u64(BigInt(this.kvs.length));
    for (const kv of this.kvs) {
      w.str(kv.key);
      w.u32(kv.type);
      if (kv.type === GGUF_TYPE.ARRAY) {
        const values = kv.value as readonly Scalar[];
        const itemType = kv.itemType!;
        w.u32(itemType);
        w.u64(BigInt(values.length));
        for (const v of values) writeScalar(w, itemType, v);
      } else {
        writeScalar(w, kv.type, kv.value as Scalar);
      }
    }
    let offset = 0;
    for (const t of this.tensors) {
      w.str(t.name);
      w.u32(t.dims.length);
      for (const d of t.dims) w.u64(BigInt(d));
      w.u32(t.type);
      w.u64(BigInt(offset));
      offset += pad(t.data.length, this.alignment);
    }
    w.padTo(this.alignment);
    for (const t of this.tensors) {
      w.bytes(t.data);
      w.padTo(this.alignment);
    }
    return w.finish();
  }
}

function pad(n: number, a: number): number {
  return Math.ceil(n / a) * a;
}

function writeScalar(w: ByteWriter, type: GgufScalarType, v: Scalar): void {
  switch (type) {
    case GGUF_TYPE.UINT8:
      return w.fixed(1, (b, o) => b.writeUInt8(Number(v), o));
    case GGUF_TYPE.INT8:
      return w.fixed(1, (b, o) => b.writeInt8(Number(v), o));
    case GGUF_TYPE.UINT16:
      return w.fixed(2, (b, o) => b.writeUInt16LE(Number(v), o));
    case GGUF_TYPE.INT16:
      return w.fixed(2, (b, o) => b.writeInt16LE(Number(v), o));
    case GGUF_TYPE.UINT32:
      return w.u32(Number(v));
    case GGUF_TYPE.INT32:
      return w.fixed(4, (b, o) => b.writeInt32LE(Number(v), o));
    case GGUF_TYPE.FLOAT32:
      return w.fixed(4, (b, o) => b.writeFloatLE(Number(v), o));
    case GGUF_TYPE.BOOL:
      return w.fixed(1, (b, o) => b.writeUInt8(v ? 1 : 0, o));
    case GGUF_TYPE.STRING:
      return w.str(String(v));
    case GGUF_TYPE.UINT64:
      return w.u64(BigInt(v));
    case GGUF_TYPE.INT64:
      return w.fixed(8, (b, o) => b.writeBigInt64LE(BigInt(v), o));
    case GGUF_TYPE.FLOAT64:
      return w.fixed(8, (b, o) => b.writeDoubleLE(Number(v), o));
  }
}

/** Append-only little-endian buffer. */
class ByteWriter {
  private buf = Buffer.alloc(1 << 16);
  private len = 0;
  private ensure(n: number): void {
    if (this.len + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.len + n) size *= 2;
    const next = Buffer.alloc(size);
    this.buf.copy(next, 0, 0, this.len);
    this.buf = next;
  }
  fixed(n: number, put: (b: Buffer, o: number) => void): void {
    this.ensure(n);
    put(this.buf, this.len);
    this.len += n;
  }
  u32(v: number): void {
    this.fixed(4, (b, o) => b.writeUInt32LE(v, o));
  }
  u64(v: bigint): void {
    this.fixed(8, (b, o) => b.writeBigUInt64LE(v, o));
  }
  str(s: string): void {
    const bytes = Buffer.from(s, 'utf8');
    this.u64(BigInt(bytes.length));
    this.bytes(bytes);
  }
  bytes(src: Uint8Array): void {
    this.ensure(src.length);
    this.buf.set(src, this.len);
    this.len += src.length;
  }
  padTo(a: number): void {
    const n = pad(this.len, a) - this.len;
    this.ensure(n);
    this.buf.fill(0, this.len, this.len + n);
    this.len += n;
  }
  finish(): Buffer {
    return this.buf.subarray(0, this.len);
  }
}

function f32Bytes(values: Float32Array): Buffer {
  const out = Buffer.alloc(values.length * 4);
  for (let i = 0; i < values.length; i++) out.writeFloatLE(values[i]!, i * 4);
  return out;
}

const f32Scratch = new Float32Array(1);
const u32Scratch = new Uint32Array(f32Scratch.buffer);
/** IEEE-754 binary32 → binary16 bits, round to nearest even. */
export function f32ToF16Bits(x: number): number {
  f32Scratch[0] = x;
  const bits = u32Scratch[0]!;
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0); // inf / nan
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00; // overflow → inf
  if (e <= 0) {
    if (e < -10) return sign; // underflow → ±0
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (rem > halfway || (rem === halfway && (half & 1))) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1))) half++; // a carry into the exponent is still correct
  return sign | half;
}

function f16Bytes(values: Float32Array): Buffer {
  const out = Buffer.alloc(values.length * 2);
  for (let i = 0; i < values.length; i++) out.writeUInt16LE(f32ToF16Bits(values[i]!), i * 2);
  return out;
}
