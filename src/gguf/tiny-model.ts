/**
 * A small, dependency-free GGUF v3 writer and `writeTinyModel()`, which writes a tiny llama-architecture
 * model with seeded random weights that llama.cpp's llama-server loads and serves (chat, completions,
 * embeddings). With an unknown architecture name (e.g. 'kev') the same file is written with the keys
 * prefixed by that name, and llama-server refuses it with `unknown model architecture: 'kev'`.
 *
 * Format (ggml/src/gguf.cpp, gguf-py/gguf/gguf_writer.py), all little-endian:
 *   "GGUF" u32 version=3, u64 n_tensors, u64 n_kv
 *   n_kv × (string key, u32 value type, value)       string = u64 byte length + UTF-8 bytes
 *   n_tensors × (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset)
 *   padding to `general.alignment` (32), then the tensor data, each tensor padded to the alignment;
 *   offsets are relative to the start of the data section and must be exactly the running padded size.
 *
 * What llama.cpp needs for LLM_ARCH_LLAMA (src/llama-model.cpp load_hparams, src/models/llama.cpp,
 * src/llama-vocab.cpp): `<arch>.context_length`, `.embedding_length`, `.block_count` (u32, required),
 * `.feed_forward_length`, `.attention.head_count(_kv)`, `.rope.dimension_count` (must equal the head
 * size), `.attention.layer_norm_rms_epsilon` (f32, required); tensors token_embd, output_norm, output,
 * blk.N.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}; and
 * `tokenizer.ggml.model` = "llama" (SentencePiece) with tokens/scores/token_type arrays and byte
 * tokens `<0xNN>` for byte fallback. Key types are checked strictly (u32 must be u32, f32 must be f32).
 */
import { createHash } from 'node:crypto';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';

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

const DEFAULT_ALIGNMENT = 32;

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

/** mulberry32: small, fast, seeded PRNG with uniform output in [0, 1). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---------------------------------------------------------------------------------------------
// Tiny model

export interface TinyModelOptions {
  /** general.architecture and the prefix of the model keys. Default 'llama'; any unknown name
   * (e.g. 'kev') gives a file llama-server refuses with `unknown model architecture: '<name>'`. */
  architecture?: string;
  /** Seed of the random weights (default 1). Same options → byte-identical file. */
  seed?: number;
  /** n_embd, a multiple of 32 (head size 32). Default 128. */
  embeddingLength?: number;
  /** Number of transformer blocks. Default 4. */
  layers?: number;
  /** `<arch>.context_length` (n_ctx_train; llama-server's default -c). Default 2048. */
  contextLength?: number;
  /** Feed-forward width. Default 2 × embeddingLength. */
  feedForwardLength?: number;
  /** Type of the 2-D weight tensors (norms are always F32). Default 'f32'. */
  tensorType?: 'f32' | 'f16';
  /** general.name. Default 'llmgw tiny test model'. */
  name?: string;
  /** Include `tokenizer.chat_template` (ChatML). Default true. */
  chatTemplate?: boolean;
  /**
   * A reranker for llama-server --reranking: rank pooling and a one-output classifier head
   * (`cls.output`). Needs `architecture: 'qwen3'` (whose blocks also get q/k norms here): llama.cpp
   * loads a classifier head for qwen3, not for llama. Default false.
   */
  reranker?: boolean;
}

export interface TinyModelFile {
  path: string;
  sha256: string;
  bytes: number;
}

/** ChatML: known to llama.cpp both with and without --jinja. */
export const CHATML_TEMPLATE =
  "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

/** Normal (non-byte, non-control) pieces of the tiny vocabulary; the model only ever generates these. */
const WORDS = [
  'the', 'a', 'is', 'ok', 'and', 'of', 'to', 'in', 'hello', 'world', 'llama', 'model', 'fleet', 'node',
  'replica', 'ready', 'git', 'server', 'token', 'tiny', 'test', 'yes', 'no', 'fine', 'good', 'run',
];
function normalPieces(): string[] {
  const pieces = ['▁'];
  for (let c = 97; c <= 122; c++) pieces.push(String.fromCharCode(c));
  for (let c = 48; c <= 57; c++) pieces.push(String.fromCharCode(c));
  pieces.push('.', ',', '!', '?');
  for (const w of WORDS) pieces.push(`▁${w}`);
  return pieces;
}

/** Number of tokens in the tiny vocabulary: <unk> <s> </s>, 256 byte tokens, then normal pieces. */
export const TINY_VOCAB_SIZE = 3 + 256 + normalPieces().length;

/**
 * Builds the tiny model as a GGUF buffer. The weights are random but shaped so that the model never
 * emits control or byte tokens: residual dimension 0 carries a constant that no layer writes to, and
 * the output row of every control/byte token is strongly negative along it (and positive for normal
 * pieces). So generation never stops early on </s> and always yields printable text.
 */
export function buildTinyModel(opts: TinyModelOptions = {}): Buffer {
  const arch = opts.architecture ?? 'llama';
  const seed = opts.seed ?? 1;
  const nEmbd = opts.embeddingLength ?? 128;
  const nLayer = opts.layers ?? 4;
  const nCtx = opts.contextLength ?? 2048;
  const nFf = opts.feedForwardLength ?? 2 * nEmbd;
  const headDim = 32;
  if (!/^[a-z0-9_-]+$/i.test(arch)) throw new Error(`tiny model: bad architecture name ${arch}`);
  if (nEmbd < headDim || nEmbd % headDim !== 0) throw new Error(`tiny model: embeddingLength must be a multiple of ${headDim}`);
  if (nLayer < 1 || nFf < 1 || nCtx < 1) throw new Error('tiny model: layers, feedForwardLength and contextLength must be positive');
  const nHead = nEmbd / headDim;
  const wType = opts.tensorType === 'f16' ? GGML_TYPE.F16 : GGML_TYPE.F32;

  // vocabulary
  const tokens: string[] = ['<unk>', '<s>', '</s>'];
  const types: number[] = [TOKEN_TYPE.UNKNOWN, TOKEN_TYPE.CONTROL, TOKEN_TYPE.CONTROL];
  const scores: number[] = [0, 0, 0];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(TOKEN_TYPE.BYTE);
    scores.push(0);
  }
  const firstNormal = tokens.length;
  normalPieces().forEach((p, i) => {
    tokens.push(p);
    types.push(TOKEN_TYPE.NORMAL);
    scores.push(-i); // SentencePiece scores: higher merges first
  });
  const nVocab = tokens.length;

  const w = new GgufWriter();
  w.string('general.architecture', arch);
  w.string('general.name', opts.name ?? 'llmgw tiny test model');
  w.setAlignment(DEFAULT_ALIGNMENT);
  w.u32('general.file_type', wType === GGML_TYPE.F16 ? 1 : 0); // ALL_F32 / MOSTLY_F16
  w.u32('general.quantization_version', 2);
  w.u32(`${arch}.vocab_size`, nVocab);
  w.u32(`${arch}.context_length`, nCtx);
  w.u32(`${arch}.embedding_length`, nEmbd);
  w.u32(`${arch}.block_count`, nLayer);
  w.u32(`${arch}.feed_forward_length`, nFf);
  w.u32(`${arch}.attention.head_count`, nHead);
  w.u32(`${arch}.attention.head_count_kv`, nHead);
  w.u32(`${arch}.rope.dimension_count`, headDim);
  w.f32(`${arch}.rope.freq_base`, 10000);
  w.f32(`${arch}.attention.layer_norm_rms_epsilon`, 1e-5);
  if (opts.reranker) w.u32(`${arch}.pooling_type`, 4); // LLAMA_POOLING_TYPE_RANK
  w.string('tokenizer.ggml.model', 'llama');
  w.string('tokenizer.ggml.pre', 'default');
  w.array('tokenizer.ggml.tokens', GGUF_TYPE.STRING, tokens);
  w.array('tokenizer.ggml.scores', GGUF_TYPE.FLOAT32, scores);
  w.array('tokenizer.ggml.token_type', GGUF_TYPE.INT32, types);
  w.u32('tokenizer.ggml.unknown_token_id', 0);
  w.u32('tokenizer.ggml.bos_token_id', 1);
  w.u32('tokenizer.ggml.eos_token_id', 2);
  w.bool('tokenizer.ggml.add_bos_token', true);
  w.bool('tokenizer.ggml.add_eos_token', false);
  if (opts.chatTemplate ?? true) w.string('tokenizer.chat_template', CHATML_TEMPLATE);

  const rand = prng(seed);
  const uniform = (n: number, scale: number): Float32Array => {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * scale;
    return a;
  };
  const ones = (n: number): Float32Array => new Float32Array(n).fill(1);

  // token_embd [n_embd, n_vocab]: dimension 0 is a constant 1 for every token
  const embd = uniform(nEmbd * nVocab, 0.05);
  for (let t = 0; t < nVocab; t++) embd[t * nEmbd] = 1;
  w.tensor('token_embd.weight', [nEmbd, nVocab], embd, wType);

  const s = 1 / Math.sqrt(nEmbd);
  for (let l = 0; l < nLayer; l++) {
    const p = `blk.${l}.`;
    w.tensor(`${p}attn_norm.weight`, [nEmbd], ones(nEmbd));
    w.tensor(`${p}attn_q.weight`, [nEmbd, nEmbd], uniform(nEmbd * nEmbd, s), wType);
    w.tensor(`${p}attn_k.weight`, [nEmbd, nEmbd], uniform(nEmbd * nEmbd, s), wType);
    w.tensor(`${p}attn_v.weight`, [nEmbd, nEmbd], uniform(nEmbd * nEmbd, s), wType);
    if (arch === 'qwen3') {
      w.tensor(`${p}attn_q_norm.weight`, [headDim], ones(headDim));
      w.tensor(`${p}attn_k_norm.weight`, [headDim], ones(headDim));
    }
    const wo = uniform(nEmbd * nEmbd, 0.5 * s);
    wo.fill(0, 0, nEmbd); // output row 0: nothing writes to residual dimension 0
    w.tensor(`${p}attn_output.weight`, [nEmbd, nEmbd], wo, wType);
    w.tensor(`${p}ffn_norm.weight`, [nEmbd], ones(nEmbd));
    w.tensor(`${p}ffn_gate.weight`, [nEmbd, nFf], uniform(nEmbd * nFf, s), wType);
    w.tensor(`${p}ffn_up.weight`, [nEmbd, nFf], uniform(nEmbd * nFf, s), wType);
    const down = uniform(nFf * nEmbd, 0.5 / Math.sqrt(nFf));
    down.fill(0, 0, nFf);
    w.tensor(`${p}ffn_down.weight`, [nFf, nEmbd], down, wType);
  }
  w.tensor('output_norm.weight', [nEmbd], ones(nEmbd));
  // output [n_embd, n_vocab]: row t gives token t's logit; dimension 0 pushes control/byte tokens far down
  const out = uniform(nEmbd * nVocab, 0.5);
  for (let t = 0; t < nVocab; t++) {
    if (t >= firstNormal) out[t * nEmbd] = 1;
    else out.fill(0, t * nEmbd, (t + 1) * nEmbd).fill(-4, t * nEmbd, t * nEmbd + 1);
  }
  w.tensor('output.weight', [nEmbd, nVocab], out, wType);
  if (opts.reranker) {
    w.tensor('cls.output.weight', [nEmbd, 1], uniform(nEmbd, s));
  }
  return w.toBuffer();
}

/** Writes the tiny model to `path` (atomically: temp file + rename) and returns its sha256 and size. */
export async function writeTinyModel(path: string, opts: TinyModelOptions = {}): Promise<TinyModelFile> {
  const buf = buildTinyModel(opts);
  await mkdir(dirname(path), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}-${Math.random().toString(36).slice(2)}`;
  await writeFile(tmp, buf);
  await rename(tmp, path);
  return { path, sha256: createHash('sha256').update(buf).digest('hex'), bytes: buf.length };
}
