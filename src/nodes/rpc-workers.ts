/**
 * The driver's side of RPC workers (ops/rpc-worker.ts has the node scripts): the bind address, the
 * port pick (the node's port range, shared with replicas), the start with retries on a port taken
 * meanwhile, and the stop. ShellNodeDriver delegates startRpcWorker / stopRpcWorker here.
 */
import { randomBytes } from 'node:crypto';
import { isLlmgwError, LlmgwError } from '../errors/catalogue.js';
import type { NodeSpec } from '../fleet-spec/types.js';
import type { Fence, RpcWorkerHandle, RpcWorkerStartSpec } from './driver.js';
import { EXIT_FENCE_REFUSED, fenceError, refusalOf } from './fence.js';
import { EXIT_PORT_TAKEN, EXIT_REPLICA_EXISTS, parseStarted, parseUsedPorts, usedPortsScript } from './ops/replica-start.js';
import { rpcBindRefusal, rpcWorkerArgs, rpcWorkerStartScript, rpcWorkerStopScript } from './ops/rpc-worker.js';
import { tailOf } from './ops/sections.js';
import { pickPort } from './ports.js';
import { scriptError } from './script-errors.js';
import type { ExecResult, Shell } from './shell.js';

/** What the driver lends the worker operations. */
export interface RpcWorkerContext {
  readonly spec: NodeSpec;
  readonly dataDir: string;
  readonly shell: Shell;
  /** The fence for this action (checked), or null without one. */
  readonly fence: Fence | null;
  /** Small scripts' timeout (the start waits up to 30 s for the worker to listen). */
  readonly opMs: number;
}

const WORKER_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * The address a node's RPC workers bind: its listen_address, else 127.0.0.1 (never the replicas'
 * 0.0.0.0 fallback). RPC_BIND_REFUSED when it is a wildcard or not an IPv4 address.
 */
export function rpcBindHost(spec: Pick<NodeSpec, 'name' | 'listenAddress'>): string {
  const host = spec.listenAddress ?? '127.0.0.1';
  const refusal = rpcBindRefusal(host);
  if (refusal !== null) throw new LlmgwError('RPC_BIND_REFUSED', `node ${spec.name}: rpc worker: ${refusal}`, { node: spec.name, host });
  return host;
}

export async function startRpcWorker(ctx: RpcWorkerContext, w: RpcWorkerStartSpec): Promise<RpcWorkerHandle> {
  const node = ctx.spec.name;
  if (!WORKER_ID_RE.test(w.id)) throw new LlmgwError('INTERNAL', `bad rpc worker id: ${JSON.stringify(w.id)}`, { node });
  if (!w.binary.startsWith('/')) throw new LlmgwError('INTERNAL', `rpc worker ${w.id}: the engine binary must be an absolute path, got ${JSON.stringify(w.binary)}`, { node });
  const host = rpcBindHost(ctx.spec);
  const avoid = new Set<number>();
  for (let attempt = 0; attempt < 8; attempt++) {
    const nonce = randomBytes(8).toString('hex');
    const used = parseUsedPorts(check(ctx, await ctx.shell.run(usedPortsScript(ctx.dataDir, nonce), { timeoutMs: ctx.opMs }), 'query ports').stdout, nonce);
    if (w.port !== undefined && used.has(w.port)) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${node}: port ${w.port} is in use`, { node, worker: w.id, port: w.port });
    const port = w.port ?? pickPort(node, ctx.spec.ports, used, avoid);
    const args = rpcWorkerArgs(host, port, w.threads ?? null);
    const log = `${ctx.dataDir}/rpc/${w.id}/log`;
    const stateHead = JSON.stringify({ version: 1, kind: 'rpc-worker', id: w.id, group: w.group, host, port, args, log }).replace(/\}$/, '');
    const script = rpcWorkerStartScript({ dataDir: ctx.dataDir, id: w.id, host, port, engineBinary: w.binary, args, stateHead, fence: ctx.fence, env: ctx.spec.env ?? {} });
    const res = await ctx.shell.run(script, { timeoutMs: ctx.opMs });
    if (res.code === EXIT_PORT_TAKEN) {
      if (w.port !== undefined) throw new LlmgwError('REPLICA_PORT_IN_USE', `node ${node}: port ${port} is in use`, { node, worker: w.id, port });
      avoid.add(port);
      continue;
    }
    if (res.code === EXIT_REPLICA_EXISTS) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: rpc worker ${w.id} already exists and is running`, { node, worker: w.id });
    try {
      check(ctx, res, `start rpc worker ${w.id}`);
    } catch (e) {
      // a worker that exited or never listened: its dir goes (the error carries its log tail)
      if (isLlmgwError(e) && (e.code === 'RPC_WORKER_EXITED' || e.code === 'RPC_WORKER_START_TIMEOUT')) await stopRpcWorker(ctx, w.id, 0).catch(() => {});
      throw e;
    }
    const started = parseStarted(res.stdout);
    if (!started) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: start rpc worker ${w.id}: unexpected output`, { node, stdout: tailOf(res.stdout, 5) });
    return { id: w.id, host, port, pid: started.pid, endpoint: `${host}:${port}`, startedAt: started.startedAtMs };
  }
  throw new LlmgwError('NODE_NO_FREE_PORT', `node ${node}: every port tried was taken meanwhile`, { node, tried: [...avoid] });
}

export async function stopRpcWorker(ctx: RpcWorkerContext, id: string, graceMs: number): Promise<void> {
  if (!WORKER_ID_RE.test(id)) return; // no such worker can exist
  check(ctx, await ctx.shell.run(rpcWorkerStopScript(ctx.dataDir, id, graceMs, ctx.fence), { timeoutMs: graceMs + 30_000 }), `stop rpc worker ${id}`);
}

function check(ctx: RpcWorkerContext, res: ExecResult, what: string): ExecResult {
  if (res.code === 0) return res;
  if (ctx.fence !== null && res.code === EXIT_FENCE_REFUSED) {
    const r = refusalOf(res.stderr);
    if (r !== null) throw fenceError(ctx.spec.name, what, ctx.fence, r);
  }
  throw scriptError(ctx.spec.name, what, res);
}
