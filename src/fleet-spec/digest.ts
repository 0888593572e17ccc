/**
 * A model's definition digest: sha256 over the canonical JSON of what decides what runs —
 * normalized source, sha256, the resolved profile with its engine version's install spec, and
 * the placement's spread when it is rpc.
 * Scheduling fields (replicas, on_demand, aliases, selector, memory) are not part of it, nor is
 * the profile's name: renaming a profile without changing it does not restart anything.
 */
import { createHash } from 'node:crypto';
import type { EngineVersionSpec, ProfileSpec } from './types.js';

export function canonicalJson(v: unknown): string {
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .filter((k) => o[k] !== undefined)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
    .join(',')}}`;
}

/** A cache_ram size as llama-server's --cache-ram takes it: MiB, rounded up (0 stays 0: no cache). */
export function cacheRamMiB(bytes: number): number {
  return Math.ceil(bytes / 2 ** 20);
}

/** llama-server's arguments as a definition names them (what of a profile decides what runs). */
function argsOf(profile: ProfileSpec): Record<string, unknown> {
  return {
    ctxSize: profile.ctxSize,
    threads: profile.threads,
    parallel: profile.parallel,
    batchSize: profile.batchSize,
    embeddings: profile.embeddings,
    // only when set, so the digests of every model that does not rerank stay as they were
    ...(profile.reranking ? { reranking: true } : {}),
    extraArgs: profile.extraArgs,
    cacheRamMiB: cacheRamMiB(profile.cacheRamBytes),
    // device settings only where set: a profile without them keeps the digest it had
    ...(profile.gpuLayers != null ? { gpuLayers: profile.gpuLayers } : {}),
    ...((profile.devices?.length ?? 0) > 0 ? { devices: profile.devices } : {}),
    ...(profile.splitMode != null ? { splitMode: profile.splitMode } : {}),
    ...((profile.tensorSplit?.length ?? 0) > 0 ? { tensorSplit: profile.tensorSplit } : {}),
    ...(profile.mainGpu != null ? { mainGpu: profile.mainGpu } : {}),
  };
}

const engineOf = (engine: EngineVersionSpec): Record<string, unknown> => ({ name: engine.engine, version: engine.version, install: engine.install });

/**
 * The definition a digest is taken of: its canonical JSON is what is hashed. `spread`: the model's
 * placement spread; rpc is part of it (a group runs a head and rpc-server workers, not one
 * llama-server), none is not, so the digests of models that do not spread stay as they were.
 */
export function definitionOf(source: string, sha256: string, profile: ProfileSpec, engine: EngineVersionSpec, spread: 'none' | 'rpc' = 'none'): Record<string, unknown> {
  return { v: 1, source, sha256: sha256.toLowerCase(), engine: engineOf(engine), args: argsOf(profile), ...(spread === 'rpc' ? { placement: { spread } } : {}) };
}

/**
 * The canonical JSON of a definition's engine and arguments, which its profile and engine version
 * decide alone: computed once per pair (a fleet's models share a handful of profiles).
 */
const runsAs = new WeakMap<ProfileSpec, WeakMap<EngineVersionSpec, string>>();

function engineAndArgs(profile: ProfileSpec, engine: EngineVersionSpec): string {
  let byEngine = runsAs.get(profile);
  if (!byEngine) runsAs.set(profile, (byEngine = new WeakMap()));
  let text = byEngine.get(engine);
  if (text === undefined) {
    text = `"args":${canonicalJson(argsOf(profile))},"engine":${canonicalJson(engineOf(engine))}`;
    byEngine.set(engine, text);
  }
  return text;
}

/**
 * sha256 of canonicalJson(definitionOf(…)), assembled from the cached part: the definition's keys
 * in canonical order are args, engine, placement (when rpc), sha256, source, v (spec-digest-canonical.test.ts checks it).
 */
export function definitionDigest(source: string, sha256: string, profile: ProfileSpec, engine: EngineVersionSpec, spread: 'none' | 'rpc' = 'none'): string {
  const placement = spread === 'rpc' ? ',"placement":{"spread":"rpc"}' : '';
  const text = `{${engineAndArgs(profile, engine)}${placement},"sha256":${JSON.stringify(sha256.toLowerCase())},"source":${JSON.stringify(source)},"v":1}`;
  return createHash('sha256').update(text).digest('hex');
}
