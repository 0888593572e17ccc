/**
 * Memory need per replica: the model's override, or an estimate from the GGUF header — the file's
 * size (weights are mapped whole) plus the KV cache for the profile's context — plus the profile's
 * overhead. Estimates are cached by file checksum and context size.
 *
 * Where the header is read: https/hf sources over HTTP range requests; file:// sources on the
 * controller when the file is there (local and loopback nodes), else on the nodes that could run the
 * model (RangeReader: NodeDriver.readFileRange over the node's shell), the first that has it.
 *
 * Every HTTP read (HEAD and each range request) has a timeout (a source host that accepts and never
 * answers would otherwise hold the pass for undici's 300 s), and a failed estimate is not retried
 * before `retryAfterMs` (the pass awaits estimates; one per pass against a dead host would slow
 * every pass by the timeout). file:// sources are tried again on every pass.
 */
import { stat } from 'node:fs/promises';
import { resolveModelSource } from '../nodes/sources.js';
import type { ModelSpec, ProfileSpec } from '../fleet-spec/types.js';
import { redactUrls } from '../util/redact-url.js';

/** @huggingface/gguf (with its task tables, ~7 MB of RSS) loads at the first header read: a fleet whose models all declare their memory never loads it. */
let ggufLib: Promise<typeof import('@huggingface/gguf')> | null = null;
const parser = (): Promise<typeof import('@huggingface/gguf')> => (ggufLib ??= import('@huggingface/gguf'));

export interface GgufShape {
  readonly fileBytes: number;
  readonly layers: number;
  readonly headCountKv: number;
  readonly keyLength: number;
  readonly valueLength: number;
  /** From the tensor table, when it was read: what a device holds per layer (see deviceNeedOf). */
  readonly tensors?: TensorShape;
}

export interface TensorShape {
  readonly embeddingLength: number;
  readonly feedForwardLength: number;
  readonly vocabSize: number;
  /** Weight bytes of each repeating layer (blk.N.*). */
  readonly layerBytes: readonly number[];
  /** The output layer's weights (output.weight, output_norm.weight; token_embd when output is tied). */
  readonly outputBytes: number;
}

/**
 * What a replica needs on a device, per layer, so placement can size any -ngl (pure data). Matches
 * llama.cpp's split (checked against its load log): `-ngl N` (N ≥ 1) puts the output layer and the
 * last min(N, n_layer + 1) − 1 repeating layers (weights and their KV cache) on the device;
 * token_embd stays on the host.
 */
export interface DeviceNeed {
  /** Weights + KV cache of each repeating layer on the device. */
  readonly perLayer: readonly number[];
  readonly outputBytes: number;
  /** Compute-buffer estimate (grows with ctx × ubatch). */
  readonly computeBytes: number;
  /** Host bytes saved per offloaded repeating layer (its weights + KV no longer on the host). */
  readonly hostPerLayer: readonly number[];
}

/** llama-server's -ngl for `all` (every repeating layer and the output layer). */
export function allLayers(need: DeviceNeed): number {
  return need.perLayer.length + 1;
}

/** Bytes on the device for `-ngl n` (0: nothing, no device used). */
export function deviceBytesFor(need: DeviceNeed, n: number): number {
  if (n <= 0) return 0;
  const nl = need.perLayer.length;
  let b = need.computeBytes + need.outputBytes;
  for (let i = nl - offloadedBlocks(nl, n); i < nl; i++) b += need.perLayer[i]!;
  return b;
}

/** Repeating layers on the device for -ngl n: the output layer counts as the first of n. */
function offloadedBlocks(nl: number, n: number): number {
  return Math.max(0, Math.min(n, nl + 1) - 1);
}

/** The most layers (-ngl) that fit in `free` bytes of a device; 0 when not even one. */
export function layersFitting(need: DeviceNeed, free: number): number {
  for (let n = allLayers(need); n > 0; n--) if (deviceBytesFor(need, n) <= free) return n;
  return 0;
}

/** Host bytes a replica no longer needs with `-ngl n` (offloaded weights and KV cache). */
export function hostSavedFor(need: DeviceNeed, n: number): number {
  if (n <= 0) return 0;
  const nl = need.hostPerLayer.length;
  let b = need.outputBytes;
  for (let i = nl - offloadedBlocks(nl, n); i < nl; i++) b += need.hostPerLayer[i]!;
  return b;
}

/**
 * The device need of a replica of this shape with this profile, or null without a tensor table.
 * Compute buffer, fitted against llama-server's own reports on the Vulkan backend (flash attention
 * on, its default): ubatch × 4 B × max(2·n_embd + 3·n_ff, n_vocab + n_embd) (the largest live
 * activations: a layer's FFN, or the logits) + ctx × ubatch × 2 B (the attention mask), with
 * ubatch = min(512, batch, ctx).
 */
export function deviceNeedOf(shape: GgufShape, profile: Pick<ProfileSpec, 'ctxSize' | 'batchSize'>): DeviceNeed | null {
  const t = shape.tensors;
  if (!t || t.layerBytes.length === 0) return null;
  const kvPerLayer = shape.layers > 0 ? kvCacheBytes(shape, profile.ctxSize) / shape.layers : 0;
  const ubatch = Math.min(512, profile.batchSize ?? 2048, profile.ctxSize);
  const widest = Math.max(2 * t.embeddingLength + 3 * t.feedForwardLength, t.vocabSize + t.embeddingLength);
  const computeBytes = ubatch * 4 * widest + profile.ctxSize * ubatch * 2;
  const perLayer = t.layerBytes.map((b) => b + kvPerLayer);
  return { perLayer, outputBytes: t.outputBytes, computeBytes, hostPerLayer: perLayer };
}

/** KV cache in f16 for `ctx` tokens (shared by the parallel slots, as llama-server allocates it). */
export function kvCacheBytes(shape: GgufShape, ctx: number): number {
  return shape.layers * ctx * shape.headCountKv * (shape.keyLength + shape.valueLength) * 2;
}

/** The estimate: weights, KV cache, the host-RAM prompt cache (--cache-ram) and the profile's overhead. */
export function replicaMemory(shape: GgufShape, profile: Pick<ProfileSpec, 'ctxSize' | 'memoryOverheadBytes' | 'cacheRamBytes'>): number {
  return shape.fileBytes + kvCacheBytes(shape, profile.ctxSize) + profile.cacheRamBytes + profile.memoryOverheadBytes;
}

function num(v: unknown): number | null {
  if (typeof v === 'number') return v;
  if (typeof v === 'bigint') return Number(v);
  if (Array.isArray(v) && v.length) return num(v[0]); // per-layer arrays: take the first
  return null;
}

interface TensorInfoLike {
  readonly name: string;
  readonly shape: readonly (bigint | number)[];
  readonly offset: bigint | number;
}

/** Per-layer weight bytes from the tensor table (each tensor's size is the distance to the next one's data). */
export function tensorShapeOf(
  metadata: Record<string, unknown>, infos: readonly TensorInfoLike[], dataOffset: number, fileBytes: number,
): TensorShape | undefined {
  if (infos.length === 0 || fileBytes <= 0) return undefined;
  const arch = String(metadata['general.architecture'] ?? 'llama');
  const sorted = [...infos].sort((a, b) => Number(a.offset) - Number(b.offset));
  const size = new Map<string, number>();
  sorted.forEach((t, i) => {
    const end = i + 1 < sorted.length ? Number(sorted[i + 1]!.offset) : fileBytes - dataOffset;
    size.set(t.name, Math.max(0, end - Number(t.offset)));
  });
  const layers = num(metadata[`${arch}.block_count`]) ?? 0;
  const layerBytes = new Array<number>(layers).fill(0);
  for (const [name, b] of size) {
    const m = /^blk\.(\d+)\./.exec(name);
    if (m && Number(m[1]) < layers) layerBytes[Number(m[1])]! += b;
  }
  const outputBytes = (size.get('output.weight') ?? size.get('token_embd.weight') ?? 0) + (size.get('output_norm.weight') ?? 0);
  const embd = sorted.find((t) => t.name === 'token_embd.weight');
  const vocab = num(metadata[`${arch}.vocab_size`]) ?? (embd ? Number(embd.shape[1] ?? 0) : 0) ?? 0;
  return {
    embeddingLength: num(metadata[`${arch}.embedding_length`]) ?? 0,
    feedForwardLength: num(metadata[`${arch}.feed_forward_length`]) ?? 0,
    vocabSize: vocab || (Array.isArray(metadata['tokenizer.ggml.tokens']) ? (metadata['tokenizer.ggml.tokens'] as unknown[]).length : 0),
    layerBytes,
    outputBytes,
  };
}

/** The shape from a parsed header (gguf()'s result): metadata, and the tensor table where given. */
export function shapeOfHeader(h: { metadata: unknown; tensorInfos?: readonly TensorInfoLike[]; tensorDataOffset?: bigint | number }, fileBytes: number): GgufShape {
  const metadata = h.metadata as Record<string, unknown>;
  const base = shapeFromMetadata(metadata, fileBytes);
  const tensors = h.tensorInfos && h.tensorDataOffset !== undefined ? tensorShapeOf(metadata, h.tensorInfos, Number(h.tensorDataOffset), fileBytes) : undefined;
  return tensors ? { ...base, tensors } : base;
}

export function shapeFromMetadata(metadata: Record<string, unknown>, fileBytes: number): GgufShape {
  const arch = String(metadata['general.architecture'] ?? 'llama');
  const k = (key: string): number | null => num(metadata[`${arch}.${key}`]);
  const layers = k('block_count') ?? 0;
  const embd = k('embedding_length') ?? 0;
  const heads = k('attention.head_count') ?? 1;
  const headsKv = k('attention.head_count_kv') ?? heads;
  const headDim = heads > 0 ? Math.floor(embd / heads) : 0;
  return { fileBytes, layers, headCountKv: headsKv, keyLength: k('attention.key_length') ?? headDim, valueLength: k('attention.value_length') ?? headDim };
}

/** Reads bytes of a file where it is: a node (NodeDriver.readFileRange). */
export interface RangeReader {
  /** The node's name, for messages. */
  readonly where: string;
  readFileRange(path: string, offset: number, length: number): Promise<{ data: Buffer; size: number }>;
}

/** The GGUF header of a file on a node: the gguf parser's range requests are served by the reader. */
export async function readShapeVia(reader: RangeReader, path: string): Promise<GgufShape> {
  let size = -1;
  const fetchRange = async (_url: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const m = /^bytes=(\d+)-(\d+)$/.exec(new Headers(init?.headers).get('range') ?? '');
    if (!m) throw new Error(`unexpected read of ${path} (no byte range)`);
    const start = Number(m[1]);
    const r = await reader.readFileRange(path, start, Number(m[2]) - start + 1);
    size = r.size;
    const body = r.data.buffer.slice(r.data.byteOffset, r.data.byteOffset + r.data.byteLength) as ArrayBuffer;
    return new Response(body, { status: 206, headers: { 'content-range': `bytes ${start}-${start + r.data.length - 1}/${r.size}` } });
  };
  const h = await (await parser()).gguf(`https://node.llmgw.invalid${encodeURI(path)}`, { fetch: fetchRange as typeof fetch });
  return shapeOfHeader(h, size);
}

/** fetch with a deadline; a timeout is reported as "<what> timed out after N s". */
function fetchWithin(timeoutMs: number): (input: string | URL | Request, init?: RequestInit) => Promise<Response> {
  return async (input, init) => {
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      return await fetch(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, signal]) : signal });
    } catch (e) {
      if (signal.aborted) {
        const url = input instanceof Request ? input.url : String(input);
        const range = new Headers(init?.headers).get('range');
        throw new Error(`${init?.method ?? 'GET'} ${url}${range ? ` (${range})` : ''} timed out after ${timeoutMs / 1000} s`, { cause: e });
      }
      throw e;
    }
  };
}

async function readShape(source: string, nodeReaders: () => readonly RangeReader[], token: () => Promise<string | null>, timeoutMs: number): Promise<GgufShape> {
  const src = resolveModelSource(source);
  if (src.kind === 'file') {
    const path = src.path;
    try {
      const [h, st] = await Promise.all([parser().then((p) => p.gguf(path, { allowLocalFile: true })), stat(path)]);
      return shapeOfHeader(h, st.size);
    } catch (e) {
      if ((e as { code?: unknown }).code !== 'ENOENT') throw e;
    }
    const readers = nodeReaders();
    if (readers.length === 0) throw new Error('not on the controller, and no reachable node to read it on');
    const tried: string[] = [];
    for (const r of readers) {
      try {
        return await readShapeVia(r, path);
      } catch (e) {
        tried.push(`${r.where}: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    throw new Error(`not on the controller; ${tried.join('; ')}`);
  }
  const url = src.url;
  // fetch follows redirects (hf:// URLs redirect to a CDN) and drops the Authorization header when
  // a redirect leaves the origin (the CDN's signed URL needs none)
  const bearer = await token();
  const auth: Record<string, string> = bearer === null ? {} : { authorization: `Bearer ${bearer}` };
  const timed = fetchWithin(timeoutMs);
  const head = await timed(url, { method: 'HEAD', headers: auth, redirect: 'follow' });
  await head.body?.cancel();
  const len = Number(head.headers.get('content-length') ?? NaN);
  if (head.status >= 400 || !Number.isFinite(len)) {
    const denied = head.status === 401 || head.status === 403;
    const why = !denied ? '' : bearer === null ? ' (a gated or private source needs token: naming a secret)' : ' (to the bearer token from the model\'s token: secret)';
    throw new Error(`HEAD ${url} answered ${head.status}${why} without a size`);
  }
  const withAuth = (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const headers = new Headers(init?.headers);
    for (const [k, v] of Object.entries(auth)) headers.set(k, v);
    return timed(input, { ...init, headers });
  };
  const h = await (await parser()).gguf(url, { fetch: withAuth as typeof fetch });
  return shapeOfHeader(h, len);
}

/**
 * bytes: the host need per replica (with a fixed gpu_layers, less what is offloaded); device: what
 * it needs on a device (profiles with gpu_layers, when the tensor table was read).
 */
export type MemoryEstimate = { readonly bytes: number; readonly device?: DeviceNeed } | { readonly error: string };

/** The estimate for a shape and profile: the host need and, with gpu_layers, the device need. */
export function estimateOf(shape: GgufShape, profile: ProfileSpec): { bytes: number; device?: DeviceNeed } {
  const host = replicaMemory(shape, profile);
  if (profile.gpuLayers == null || profile.gpuLayers === 0) return { bytes: host };
  const device = deviceNeedOf(shape, profile);
  if (device === null) return { bytes: host };
  // auto: as many layers as fit where it is placed; the host keeps room for all of them (conservative)
  const n = profile.gpuLayers === 'all' ? allLayers(device) : profile.gpuLayers === 'auto' ? 0 : profile.gpuLayers;
  return { bytes: Math.max(0, host - hostSavedFor(device, n)), device };
}

/** Which header a model's estimate reads (the same file at the same source: read once). */
const shapeKey = (model: ModelSpec): string => `${model.sha256}|${model.source}`;

/** The estimate from a header read: an override stays the host need (the header gives the device need). */
function withShape(model: ModelSpec, profile: ProfileSpec, shape: GgufShape): MemoryEstimate {
  const e = estimateOf(shape, profile);
  return model.memoryBytes !== null ? { ...e, bytes: model.memoryBytes } : e;
}

export interface MemoryEstimatorOptions {
  /** Deadline of each HTTP read of a GGUF header (HEAD, each range request); default 5 s. */
  readonly httpTimeoutMs?: number;
  /** A failed estimate is not tried again before this; default 60 s. */
  readonly retryAfterMs?: number;
  readonly clock?: () => number;
}

export const DEFAULT_HEADER_TIMEOUT_MS = 5_000;
export const DEFAULT_ESTIMATE_RETRY_MS = 60_000;

export class MemoryEstimator {
  private readonly shapes = new Map<string, Promise<GgufShape>>();
  /** Failed estimates: the error and when it may be tried again. */
  private readonly failed = new Map<string, { readonly error: string; readonly retryAt: number }>();
  private readonly httpTimeoutMs: number;
  private readonly retryAfterMs: number;
  private readonly clock: () => number;
  /** Headers read, by model file: what estimate() answers at once from then on. */
  private readonly read = new Map<string, GgufShape>();
  /** The estimate last made for each model from its override or a header read, with the profile it was made for. */
  private readonly estimates = new WeakMap<ModelSpec, { readonly profile: ProfileSpec; readonly estimate: MemoryEstimate }>();
  /** Header reads started (for tests: a failed estimate is not read again on every pass). */
  reads = 0;

  constructor(o: MemoryEstimatorOptions = {}) {
    this.httpTimeoutMs = o.httpTimeoutMs ?? DEFAULT_HEADER_TIMEOUT_MS;
    this.retryAfterMs = o.retryAfterMs ?? DEFAULT_ESTIMATE_RETRY_MS;
    this.clock = o.clock ?? Date.now;
  }

  /**
   * The estimate when no read is needed for it: an override (without gpu_layers), a header read
   * already, a failure not due for another try yet; undefined when it takes a read (estimate()).
   * A pass asks this first, so a fleet whose needs are known costs no promise per model.
   */
  known(model: ModelSpec, profile: ProfileSpec): MemoryEstimate | undefined {
    // an override, or a header read (read for good: its read is kept, it never fails after): the estimate made stands
    const kept = this.estimates.get(model);
    if (kept?.profile === profile) return kept.estimate;
    // an override is the host need; with gpu_layers the header is still read for the device need
    if (model.memoryBytes !== null && (profile.gpuLayers == null || profile.gpuLayers === 0)) return this.keep(model, profile, { bytes: model.memoryBytes });
    const key = shapeKey(model);
    const failed = this.failed.get(key);
    if (failed && this.clock() < failed.retryAt) return { error: failed.error };
    const shape = this.read.get(key);
    return shape === undefined ? undefined : this.fromRead(model, profile, shape);
  }

  /** The estimate from a header read, kept. */
  private fromRead(model: ModelSpec, profile: ProfileSpec, shape: GgufShape): MemoryEstimate {
    return this.keep(model, profile, withShape(model, profile, shape));
  }

  /** Kept by model and profile object (a spec's objects are per revision): the same object answered from then on. */
  private keep(model: ModelSpec, profile: ProfileSpec, estimate: MemoryEstimate): MemoryEstimate {
    this.estimates.set(model, { profile, estimate });
    return estimate;
  }

  /**
   * The model's need per replica; an error says why it is not known (yet). `nodeReaders`: the nodes
   * a file:// source missing on the controller is read on, in order (asked for only then). `token`:
   * the bearer token for an https/hf source (asked for only when the header is read).
   */
  async estimate(
    model: ModelSpec,
    profile: ProfileSpec,
    nodeReaders: () => readonly RangeReader[] = () => [],
    token: () => Promise<string | null> = async () => null,
  ): Promise<MemoryEstimate> {
    const known = this.known(model, profile);
    if (known !== undefined) return known;
    const key = shapeKey(model);
    let p = this.shapes.get(key);
    if (!p) {
      this.reads++;
      p = readShape(model.source, nodeReaders, token, this.httpTimeoutMs);
      this.shapes.set(key, p);
      p.catch(() => this.shapes.delete(key)); // tried again after retryAfterMs
    }
    try {
      const shape = await p;
      this.failed.delete(key);
      this.read.set(key, shape);
      return this.fromRead(model, profile, shape);
    } catch (e) {
      const why = redactUrls(e instanceof Error ? e.message : String(e));
      // file:// sources are read on the controller or over the nodes' shells (which have their own
      // timeouts, and whose set changes as nodes come and go): tried again on the next pass
      if (resolveModelSource(model.source).kind === 'file') return { error: `memory need unknown: could not read the GGUF header of ${redactUrls(model.source)} (${why}); set memory: in ${model.file}` };
      const error = `memory need unknown: could not read the GGUF header of ${redactUrls(model.source)} (${why}); next try in ${Math.round(this.retryAfterMs / 1000)} s; set memory: in ${model.file}`;
      this.failed.set(key, { error, retryAt: this.clock() + this.retryAfterMs });
      return { error };
    }
  }
}
