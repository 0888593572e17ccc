/**
 * What `llmgw plan` knows of the running fleet, read from what the controller writes: the status
 * branch's files (fleet.json + models/<model>.json) or the admin API's JSON (GET /admin/v1/models,
 * GET /admin/v1/nodes). Both are the same wire shapes (src/admin/shape.ts).
 */
import type { ModelJson, NodeJson, StatusFleetJson, StatusModelJson } from '../wire/shape.js';

export interface PlanStatus {
  readonly models: Readonly<Record<string, Pick<StatusModelJson, 'memoryBytes' | 'parked' | 'replicas'>>>;
  readonly nodes: Readonly<Record<string, { readonly reachable: boolean; readonly memory: { readonly totalBytes: number } | null; readonly engines: readonly string[]; readonly devices?: readonly { readonly name: string; readonly totalBytes: number }[] }>>;
}

export class StatusFormatError extends Error {}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function modelsOf(list: readonly unknown[], where: string): PlanStatus['models'] {
  const out: Record<string, Pick<StatusModelJson, 'memoryBytes' | 'parked' | 'replicas'>> = {};
  for (const m of list) {
    if (!isObject(m) || typeof m.name !== 'string' || !Array.isArray(m.replicas)) throw new StatusFormatError(`${where}: a model entry is not an llmgw model (name, replicas, …)`);
    const j = m as unknown as ModelJson;
    out[j.name] = { memoryBytes: j.memoryBytes ?? null, parked: j.parked ?? null, replicas: j.replicas };
  }
  return out;
}

function nodesOf(list: readonly unknown[], where: string): PlanStatus['nodes'] {
  const out: Record<string, PlanStatus['nodes'][string]> = {};
  for (const n of list) {
    if (!isObject(n) || typeof n.name !== 'string' || typeof n.reachable !== 'boolean') throw new StatusFormatError(`${where}: a node entry is not an llmgw node (name, reachable, …)`);
    const j = n as unknown as NodeJson;
    const devices = Array.isArray(j.devices) ? j.devices.filter((d) => isObject(d) && typeof d.name === 'string' && typeof d.totalBytes === 'number').map((d) => ({ name: d.name, totalBytes: d.totalBytes })) : [];
    out[j.name] = { reachable: j.reachable, memory: j.memory ? { totalBytes: j.memory.totalBytes } : null, engines: Array.isArray(j.engines) ? j.engines : [], devices };
  }
  return out;
}

/** The status branch's files (path → content), as a checkout or git objects hold them. */
export function statusFromBranchFiles(files: Readonly<Record<string, string>>, where: string): PlanStatus {
  const fleetText = files['fleet.json'];
  if (fleetText === undefined) throw new StatusFormatError(`${where}: no fleet.json (not an llmgw status branch)`);
  const fleet = JSON.parse(fleetText) as StatusFleetJson;
  if (!isObject(fleet) || fleet.version !== 2 || !Array.isArray(fleet.nodes)) throw new StatusFormatError(`${where}/fleet.json: not an llmgw status file (version 2)`);
  const models = Object.entries(files)
    .filter(([p]) => /^models\/[^/]+\.json$/.test(p))
    .map(([p, text]) => {
      try {
        return JSON.parse(text) as unknown;
      } catch (e) {
        throw new StatusFormatError(`${where}/${p}: not JSON (${(e as Error).message})`);
      }
    });
  return { models: modelsOf(models, `${where}/models`), nodes: nodesOf(fleet.nodes, `${where}/fleet.json`) };
}

/** One JSON document: the admin API's /models or /nodes answer, or a status branch's fleet.json. */
export function statusFromJson(doc: unknown, where: string): PlanStatus {
  if (!isObject(doc)) throw new StatusFormatError(`${where}: not an llmgw status document`);
  const models = Array.isArray(doc.models) ? modelsOf(doc.models, where) : {};
  const nodes = Array.isArray(doc.nodes) ? nodesOf(doc.nodes, where) : {};
  if (!Array.isArray(doc.models) && !Array.isArray(doc.nodes)) {
    throw new StatusFormatError(`${where}: not an llmgw status document (expected the admin API's /models or /nodes JSON, or a status branch checkout)`);
  }
  return { models, nodes };
}

/** Several documents (e.g. /models and /nodes) as one. */
export function mergeStatus(parts: readonly PlanStatus[]): PlanStatus {
  return { models: Object.assign({}, ...parts.map((p) => p.models)), nodes: Object.assign({}, ...parts.map((p) => p.nodes)) };
}
