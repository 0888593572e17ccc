/**
 * `writeTinyModel()`, which writes a tiny llama-architecture model with seeded random weights that
 * llama.cpp's llama-server loads and serves (chat, completions, embeddings), in the GGUF format
 * written by gguf-writer.ts. With an unknown architecture name (e.g. 'kev') the same file is written
 * with the keys prefixed by that name, and llama-server refuses it with `unknown model architecture: 'kev'`.
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
import { DEFAULT_ALIGNMENT, GGML_TYPE, GGUF_TYPE, GgufWriter, TOKEN_TYPE } from './gguf-writer.js';

/** mulberry32: small, fast, seeded PRNG with uniform output in [0, 1) (the benches' simulations use it too). */
export function prng(seed: number): () => number {
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
