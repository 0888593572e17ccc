/**
 * The workers of an RPC group (I/O, #40): started before the group's head (start-op.ts), each an
 * rpc-server on its node beside the same engine version as the head's, and stopped with the head
 * (stop-runner.ts) or when the group's start fails. Errors name the host that failed.
 */
import type { Logger } from 'pino';
import type { EngineVersionSpec, ProfileSpec } from '../fleet-spec/types.js';
import { isLlmgwError, LlmgwError, reasonOf } from '../errors/catalogue.js';
import type { NodeDriver } from '../nodes/driver.js';
import { rpcHeadFailure, workersNotLoaded } from '../nodes/rpc-log.js';
import { readShapeVia } from './memory.js';
import type { GroupMember } from './replica-life.js';

/** Lines of the head's log read for its workers' buffers (printed while the model loads, at -lv 4). */
const HEAD_LOG_LINES = 5000;

export type DriverOf = (node: string) => NodeDriver | undefined;

/** The workers of a group: its members but the head. */
export const workersOf = (group: readonly GroupMember[]): GroupMember[] => group.filter((h) => h.role === 'worker' && h.worker !== undefined);

/**
 * Each worker's rpc-server started (all at once), its engine installed first: the `--rpc` entries
 * (host:port) in the group's order. A failure stops the workers started and throws the failing
 * host's reason, naming it.
 */
export async function startGroupWorkers(g: { readonly model: string; readonly replicaId: string; readonly group: readonly GroupMember[] }, engine: EngineVersionSpec, profile: ProfileSpec, driverOf: DriverOf, log: Logger): Promise<string[]> {
  const workers = workersOf(g.group);
  const started: GroupMember[] = [];
  const results = await Promise.allSettled(workers.map(async (w) => {
    const d = driverOf(w.node);
    if (d === undefined) throw new LlmgwError('NODE_UNREACHABLE', `node ${w.node} is not in the fleet spec`, { node: w.node });
    if (d.startRpcWorker === undefined) throw new LlmgwError('ENGINE_NO_RPC', `node ${w.node}: this node driver runs no RPC workers`, { node: w.node });
    try {
      const { binary } = await d.ensureEngine(engine);
      const h = await d.startRpcWorker({ id: w.worker!, group: g.model, binary, ...(profile.threads !== null ? { threads: profile.threads } : {}) });
      started.push(w);
      log.info({ node: w.node, worker: w.worker, endpoint: h.endpoint }, 'rpc worker started');
      return h.endpoint;
    } catch (e) {
      throw namedHost(e, w);
    }
  }));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) {
    await stopGroupWorkers(started, driverOf, log, 0);
    throw failed.reason;
  }
  return results.map((r) => (r as PromiseFulfilledResult<string>).value);
}

/**
 * The half of a group's readiness that /health does not say: the head's log shows every worker's
 * model buffer. RPC_WORKER_UNREACHABLE (or the head's own RPC reason) naming the workers it lacks.
 */
export async function groupReadiness(head: NodeDriver, replicaId: string, endpoints: readonly string[]): Promise<void> {
  const log = await head.logTail(replicaId, HEAD_LOG_LINES);
  const missing = workersNotLoaded(log, endpoints);
  if (missing.length === 0) return;
  const f = rpcHeadFailure(log);
  if (f) throw new LlmgwError(f.code, f.message, { replica: replicaId, endpoint: f.endpoint });
  throw new LlmgwError('RPC_WORKER_UNREACHABLE', `the head answers /health but its log shows no model buffer on the worker${missing.length > 1 ? 's' : ''} at ${missing.join(', ')} (it runs at -lv 4, which prints them)`, { replica: replicaId, workers: missing });
}

/** The model's repeating layers, from the GGUF header of its file on the head's node; null (and logged) when it cannot be read. */
export async function layersOf(head: NodeDriver, path: string, log: Logger): Promise<number | null> {
  try {
    const shape = await readShapeVia({ where: head.node, readFileRange: (p, o, l) => head.readFileRange(p, o, l) }, path);
    return shape.layers > 0 ? shape.layers : null;
  } catch (e) {
    log.warn({ err: reasonOf(e).message, path }, 'rpc group: the model file\'s header could not be read; every layer goes to the workers');
    return null;
  }
}

/** Each worker's rpc-server stopped (idempotent: a worker gone already is fine); failures are logged, never thrown. */
export async function stopGroupWorkers(group: readonly GroupMember[], driverOf: DriverOf, log: Logger, graceMs: number): Promise<void> {
  await Promise.all(workersOf(group).map(async (w) => {
    const d = driverOf(w.node);
    try {
      await d?.stopRpcWorker?.(w.worker!, graceMs);
    } catch (e) {
      const r = reasonOf(e);
      log.warn({ node: w.node, worker: w.worker, code: r.code, reason: r.message }, 'stopping an rpc worker failed; its node\'s next look finds it');
    }
  }));
}

/** The error with the worker's host named ("group worker on node-b: …"), its code kept. */
function namedHost(e: unknown, w: GroupMember): unknown {
  if (!isLlmgwError(e)) return e;
  if (e.detail.node === w.node) return e;
  return new LlmgwError(e.code, `group worker on ${w.node}: ${e.message}`, { ...e.detail, node: w.node, worker: w.worker }, { cause: e });
}
