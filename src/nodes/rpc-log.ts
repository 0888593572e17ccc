/**
 * What a head llama-server's log says about its RPC workers (issue #40), matched on lines captured from
 * the real llama-server and rpc-server of the test engine (test/fixtures/rpc-logs/, docs/rpc-groups.md):
 *
 * - each worker's buffers, printed at -lv 4 and above while the model loads (the readiness rule: the
 *   head's /health is 200 and its log shows every worker's model buffer):
 *     load_tensors: RPC0[10.0.0.5:50052] model buffer size =     2.66 MiB
 *     llama_kv_cache: RPC0[10.0.0.5:50052] KV buffer size =     0.50 MiB
 *     sched_reserve: RPC0[10.0.0.5:50052] compute buffer size =     1.25 MiB
 * - a worker of another protocol version (the head aborts):
 *     E RPC server version mismatch: 5.0.0
 *     …/ggml-rpc.cpp:550: RPC handshake failed for 10.0.0.5:50052
 * - a worker not listening (the head aborts):  …/ggml-rpc.cpp:547: Failed to connect to 10.0.0.5:50052
 * - a worker gone while the head runs (the head aborts at its next request; its /health stays 200
 *   until then):  …/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response
 *
 * Pure: the lifecycle (planned) feeds it the head's log tail.
 */
import type { ReasonCode } from '../errors/catalogue.js';

export interface RpcBuffer {
  /** The head's name for the device: RPC0, RPC1, … */
  readonly device: string;
  /** The worker, host:port as given to --rpc. */
  readonly endpoint: string;
  readonly kind: 'model' | 'KV' | 'compute';
  readonly mib: number;
}

const BUFFER_RE = /\b(RPC\d{1,3})\[([^\]\s]{1,300})\] (model|KV|compute) buffer size =\s*(\d+(?:\.\d+)?) MiB/;

/** One buffer line of a worker; null for any other line (a CPU or GPU buffer included). */
export function parseRpcBuffer(line: string): RpcBuffer | null {
  const m = BUFFER_RE.exec(line);
  if (!m) return null;
  return { device: m[1]!, endpoint: m[2]!, kind: m[3] as RpcBuffer['kind'], mib: Number(m[4]) };
}

/** Every worker buffer the log shows, by endpoint. */
export function rpcBuffers(log: string): Map<string, RpcBuffer[]> {
  const out = new Map<string, RpcBuffer[]>();
  for (const line of log.split('\n')) {
    const b = parseRpcBuffer(line);
    if (b) out.set(b.endpoint, [...(out.get(b.endpoint) ?? []), b]);
  }
  return out;
}

/** The workers (host:port) whose model buffer the log does not show yet: none left is the log half of "ready". */
export function workersNotLoaded(log: string, endpoints: readonly string[]): string[] {
  const seen = rpcBuffers(log);
  return endpoints.filter((e) => !(seen.get(e) ?? []).some((b) => b.kind === 'model'));
}

export interface RpcHeadFailure {
  readonly code: Extract<ReasonCode, 'RPC_VERSION_MISMATCH' | 'RPC_WORKER_UNREACHABLE' | 'RPC_WORKER_EXITED'>;
  /** The worker it names (host:port); null when the line names none. */
  readonly endpoint: string | null;
  readonly message: string;
}

/** Why a head failed because of a worker, from its log; null when the log says nothing of the kind. */
export function rpcHeadFailure(log: string): RpcHeadFailure | null {
  const version = /RPC server version mismatch: (\d{1,3}\.\d{1,3}\.\d{1,3})/.exec(log);
  if (version) {
    const ep = /RPC handshake failed for (\S{1,300})/.exec(log)?.[1] ?? null;
    return { code: 'RPC_VERSION_MISMATCH', endpoint: ep, message: `the worker${ep ? ` at ${ep}` : ''} speaks RPC protocol ${version[1]}, which this head's llama-server does not (the hosts run different engine versions)` };
  }
  const refused = /ggml-rpc\.cpp:\d+: Failed to connect to (\S{1,300})/.exec(log);
  if (refused) return { code: 'RPC_WORKER_UNREACHABLE', endpoint: refused[1]!, message: `the head could not connect to the worker at ${refused[1]!}` };
  if (/Remote RPC server crashed or returned malformed response/.test(log)) {
    return { code: 'RPC_WORKER_EXITED', endpoint: null, message: 'a worker died or dropped its connection while the head used it (the head aborted)' };
  }
  return null;
}
