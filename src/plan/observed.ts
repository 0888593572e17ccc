/**
 * What `llmgw plan` knows of the running fleet: node memory, installed engines, where replicas
 * run, parked models and each model's memory need as the controller computed it. Read from what
 * the controller writes — the status branch's files or a status JSON document — through the one
 * adapter below (`observedFromStatusFiles`), so a change of the status shape is one function.
 */
import type { FleetStatus, ModelStatus } from '../reconciler/status-types.js';

export interface ObservedReplica {
  readonly node: string;
  readonly digest: string;
  readonly ready: boolean;
}

export interface ObservedModel {
  readonly memoryBytes: number | null;
  readonly parked: { readonly since: string; readonly lastError: { readonly code: string; readonly message: string } } | null;
  /** Where its replicas run; null when the status does not say. */
  readonly replicas: readonly ObservedReplica[] | null;
  /** How many replicas it had (ready), when the status says only that. */
  readonly running: number | null;
}

export interface ObservedNode {
  readonly name: string;
  readonly reachable: boolean;
  readonly memoryTotalBytes: number | null;
  /** "engine@version" installed. */
  readonly engines: readonly string[];
}

export interface ObservedFleet {
  /** Where it was read, for the report ("status branch llmgw/status at 1a2b3c4d5e6f"). */
  readonly source: string;
  /** When the controller wrote it (epoch ms), when known. */
  readonly writtenAt: number | null;
  /** The fleet revision the controller had applied. */
  readonly appliedRevision: string | null;
  readonly nodes: Readonly<Record<string, ObservedNode>>;
  readonly models: Readonly<Record<string, ObservedModel>>;
}

export class StatusShapeError extends Error {}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function parse(text: string, where: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new StatusShapeError(`${where}: not JSON (${e instanceof Error ? e.message : String(e)})`);
  }
}

function modelOf(m: Partial<ModelStatus> & { replicas?: unknown }): ObservedModel {
  const replicas = Array.isArray(m.replicas)
    ? (m.replicas as { node?: unknown; digest?: unknown; phase?: unknown }[])
        .filter((r) => typeof r.node === 'string' && r.phase !== 'failed' && r.phase !== 'stopping')
        .map((r) => ({ node: r.node as string, digest: typeof r.digest === 'string' ? r.digest : '', ready: r.phase === 'ready' }))
    : null;
  const running = replicas ? replicas.length : typeof m.ready === 'number' ? m.ready : null;
  const p = m.parked as { since: string | number; lastError: { code: string; message: string } } | null | undefined;
  const parked = p ? { since: typeof p.since === 'number' ? new Date(p.since).toISOString() : p.since, lastError: p.lastError } : null;
  return { memoryBytes: typeof m.memoryBytes === 'number' ? m.memoryBytes : null, parked, replicas, running };
}

/**
 * THE ADAPTER: the status branch's files (path → content) as the controller writes them
 * (src/reconciler/summarize.ts statusFiles: fleet.json + models/<model>.json). Today's files do not
 * say where replicas run (replicas: null); model files that carry a `replicas` list (the admin
 * API's model JSON) are read with it.
 */
export function observedFromStatusFiles(files: Readonly<Record<string, string>>, source: string, writtenAt: number | null): ObservedFleet {
  const fleetText = files['fleet.json'];
  if (fleetText === undefined) throw new StatusShapeError(`${source}: no fleet.json (not an llmgw status branch)`);
  const fleet = parse(fleetText, `${source}: fleet.json`);
  if (!isObject(fleet) || !isObject(fleet.nodes) && !Array.isArray(fleet.nodes)) throw new StatusShapeError(`${source}: fleet.json is not an llmgw status file (no nodes)`);
  const nodes: Record<string, ObservedNode> = {};
  for (const n of Object.values(fleet.nodes as Record<string, unknown>)) {
    if (!isObject(n) || typeof n.name !== 'string') continue;
    const total = typeof n.memoryTotalBytes === 'number' ? n.memoryTotalBytes : isObject(n.memory) && typeof n.memory.totalBytes === 'number' ? n.memory.totalBytes : null;
    nodes[n.name] = { name: n.name, reachable: n.reachable === true, memoryTotalBytes: total, engines: Array.isArray(n.engines) ? (n.engines as string[]) : [] };
  }
  const models: Record<string, ObservedModel> = {};
  for (const [path, text] of Object.entries(files)) {
    const name = /^models\/([^/]+)\.json$/.exec(path)?.[1];
    if (!name) continue;
    const m = parse(text, `${source}: ${path}`);
    if (isObject(m)) models[typeof m.name === 'string' ? m.name : name] = modelOf(m as Partial<ModelStatus>);
  }
  return { source, writtenAt, appliedRevision: typeof fleet.appliedRevision === 'string' ? fleet.appliedRevision : null, nodes, models };
}

/** `--status FILE`: the combined status JSON (version 1), or the admin API's /models or /nodes answer. */
export function observedFromJson(doc: unknown, source: string): ObservedFleet {
  if (!isObject(doc)) throw new StatusShapeError(`${source}: not an llmgw status document`);
  if (doc.version === 1 && isObject(doc.models) && isObject(doc.nodes)) {
    const s = doc as unknown as FleetStatus;
    const files: Record<string, string> = { 'fleet.json': JSON.stringify({ appliedRevision: s.appliedRevision, nodes: s.nodes }) };
    for (const [name, m] of Object.entries(s.models)) files[`models/${name}.json`] = JSON.stringify(m);
    return observedFromStatusFiles(files, source, Date.parse(s.generatedAt) || null);
  }
  if (Array.isArray(doc.models) || Array.isArray(doc.nodes)) {
    const files: Record<string, string> = { 'fleet.json': JSON.stringify({ nodes: Array.isArray(doc.nodes) ? doc.nodes : [] }) };
    for (const m of Array.isArray(doc.models) ? (doc.models as unknown[]) : []) if (isObject(m) && typeof m.name === 'string') files[`models/${m.name}.json`] = JSON.stringify(m);
    return observedFromStatusFiles(files, source, typeof doc.at === 'string' ? Date.parse(doc.at) || null : null);
  }
  throw new StatusShapeError(`${source}: not an llmgw status document (expected the status JSON, the admin API's /models or /nodes answer, or a status branch)`);
}

/** Several documents (e.g. the admin API's /models and /nodes) as one. */
export function mergeObserved(parts: readonly ObservedFleet[]): ObservedFleet {
  const [first] = parts;
  if (!first || parts.length === 1) return first!;
  return {
    source: parts.map((p) => p.source).join(' + '),
    writtenAt: Math.min(...parts.map((p) => p.writtenAt ?? Infinity)) === Infinity ? null : Math.min(...parts.map((p) => p.writtenAt ?? Infinity)),
    appliedRevision: parts.find((p) => p.appliedRevision)?.appliedRevision ?? null,
    nodes: Object.assign({}, ...parts.map((p) => p.nodes)) as Record<string, ObservedNode>,
    models: Object.assign({}, ...parts.map((p) => p.models)) as Record<string, ObservedModel>,
  };
}
