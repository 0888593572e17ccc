/**
 * Memory needs of the models a plan places, computed as the controller computes them (the
 * override, else the GGUF header of the source through the reconciler's estimator math:
 * shapeFromMetadata + replicaMemory), read where a PR check runs: https and hf sources over HTTP
 * range requests with a timeout; file:// sources only when the file is on this machine. Each
 * model whose need stays unknown gets one message saying why, naming its own file.
 */
import { stat } from 'node:fs/promises';
import { gguf } from '@huggingface/gguf';
import { estimateOf, shapeOfHeader, type DeviceNeed, type GgufShape } from '../reconciler/memory.js';
import { groupLayersOf, type GroupLayers } from '../reconciler/group-placement.js';
import { resolveModelSource } from '../nodes/sources.js';
import type { FleetSpec, ModelSpec } from '../fleet-spec/types.js';
import { formatDuration } from '../fleet-spec/units.js';
import { redactUrls } from '../util/redact-url.js';

/** layers: of a `spread: rpc` model whose header was read (how a group would split it). */
export type Need = { readonly bytes: number; readonly from: 'override' | 'header' | 'status'; readonly device?: DeviceNeed; readonly layers?: GroupLayers } | { readonly error: string };

export interface NeedsOptions {
  /** Per model header read (default 10 s). */
  readonly timeoutMs?: number;
  /** Known needs (from the controller's status), used for models not read here. */
  readonly known?: Readonly<Record<string, number | null>>;
}

export const DEFAULT_HEADER_TIMEOUT_MS = 10_000;

async function readHeader(source: string, signal: AbortSignal): Promise<GgufShape> {
  const src = resolveModelSource(source);
  if (src.kind === 'file') {
    try {
      const [h, st] = await Promise.all([gguf(src.path, { allowLocalFile: true }), stat(src.path)]);
      return shapeOfHeader(h, st.size);
    } catch (e) {
      if ((e as { code?: unknown }).code === 'ENOENT') throw new Error(`${src.path} is not on this machine (a file:// source is read on the nodes)`);
      throw e;
    }
  }
  const head = await fetch(src.url, { method: 'HEAD', redirect: 'follow', signal });
  await head.body?.cancel();
  const len = Number(head.headers.get('content-length') ?? NaN);
  if (head.status >= 400 || !Number.isFinite(len)) {
    const denied = head.status === 401 || head.status === 403 ? ' (a gated or private source: the plan reads it without the model\'s token)' : '';
    throw new Error(`HEAD ${src.url} answered ${head.status}${denied} without a size`);
  }
  const withSignal = (input: string | URL | Request, init?: RequestInit): Promise<Response> => fetch(input, { ...init, signal });
  const h = await gguf(src.url, { fetch: withSignal as typeof fetch });
  return shapeOfHeader(h, len);
}

/** One model's need. */
export async function needOf(spec: FleetSpec, m: ModelSpec, timeoutMs: number = DEFAULT_HEADER_TIMEOUT_MS): Promise<Need> {
  if (m.memoryBytes !== null) return { bytes: m.memoryBytes, from: 'override' };
  const profile = spec.profiles[m.profile]!;
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const shape = await readHeader(m.source, signal);
    const layers = m.placement?.spread === 'rpc' ? groupLayersOf(shape, profile.ctxSize) : null;
    return { ...estimateOf(shape, profile), from: 'header', ...(layers ? { layers } : {}) };
  } catch (e) {
    const why = signal.aborted ? `timed out after ${formatDuration(timeoutMs)}` : e instanceof Error ? e.message : String(e);
    return { error: redactUrls(`memory need unknown: could not read the GGUF header of ${m.source} (${why}); set memory: in ${m.file}`) };
  }
}

/**
 * Needs of `read` models from their headers (in parallel), of the others from `known` (the
 * controller's estimates in its status) or their override.
 */
export async function memoryNeeds(spec: FleetSpec, read: readonly string[], opts: NeedsOptions = {}): Promise<Record<string, Need>> {
  const out: Record<string, Need> = {};
  const toRead = new Set(read);
  await Promise.all(
    Object.values(spec.models).map(async (m) => {
      const known = opts.known?.[m.name] ?? null;
      if (m.memoryBytes !== null) out[m.name] = { bytes: m.memoryBytes, from: 'override' };
      else if (!toRead.has(m.name) && known !== null) out[m.name] = { bytes: known, from: 'status' };
      else if (toRead.has(m.name) || known === null) out[m.name] = await needOf(spec, m, opts.timeoutMs);
    }),
  );
  return out;
}
