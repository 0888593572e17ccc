/**
 * What `llmgw plan` knows of the running fleet: node memory, installed engines, where replicas
 * run, parked models and each model's memory need as the controller computed it. Read from what
 * the controller writes — the status branch's files or the admin API's JSON, parsed by status.ts —
 * through the one adapter below (`observedFromPlanStatus`), so a change of the shape is one function.
 */
import type { PlanStatus } from './status.js';

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
  /** How many replicas it had, when the status says only that. */
  readonly running: number | null;
}

export interface ObservedNode {
  readonly name: string;
  readonly reachable: boolean;
  readonly memoryTotalBytes: number | null;
  /** "engine@version" installed. */
  readonly engines: readonly string[];
  /** The devices its engines list (capacity only). */
  readonly devices?: readonly { readonly name: string; readonly totalBytes: number }[];
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

/**
 * THE ADAPTER: what plan/status.ts reads from the status branch or the admin API's JSON (the
 * admin API's shapes), as the simulation's input. `meta`: where it came from, when it was written
 * (the status commit's time, the JSON's `at`) and the revision it is for (fleet.json's `revision`).
 */
export function observedFromPlanStatus(status: PlanStatus, meta: { readonly source: string; readonly writtenAt: number | null; readonly appliedRevision: string | null }): ObservedFleet {
  const nodes: Record<string, ObservedNode> = {};
  for (const [name, n] of Object.entries(status.nodes)) nodes[name] = { name, reachable: n.reachable, memoryTotalBytes: n.memory?.totalBytes ?? null, engines: n.engines, devices: n.devices ?? [] };
  const models: Record<string, ObservedModel> = {};
  for (const [name, m] of Object.entries(status.models)) {
    const replicas = m.replicas.filter((r) => r.phase !== 'failed' && r.phase !== 'stopping').map((r) => ({ node: r.node, digest: r.digest, ready: r.phase === 'ready' }));
    models[name] = {
      memoryBytes: m.memoryBytes,
      parked: m.parked ? { since: m.parked.since, lastError: { code: m.parked.lastError.code, message: m.parked.lastError.message } } : null,
      replicas,
      running: replicas.length,
    };
  }
  return { ...meta, nodes, models };
}

/** `at` and `revision` of an admin API document or a status branch's fleet.json, when present. */
export function documentMeta(doc: unknown): { writtenAt: number | null; revision: string | null } {
  const o = typeof doc === 'object' && doc !== null ? (doc as Record<string, unknown>) : {};
  const at = typeof o.at === 'string' ? Date.parse(o.at) : typeof o.at === 'number' ? o.at : NaN;
  return { writtenAt: Number.isFinite(at) ? at : null, revision: typeof o.revision === 'string' ? o.revision : null };
}
