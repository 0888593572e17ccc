/**
 * One process of the router benchmark (forked by bench/router.bench.ts, IPC channel required):
 *
 *   bench-child stub                    the fast upstream stub (bench/upstream-stub.ts)
 *   bench-child bare   UPSTREAM         a bare Node passthrough: node:http + undici Pool.stream, no
 *                                       auth, no routing — the floor for any Node proxy
 *   bench-child router UPSTREAM ENGINE_KEY   llmgw's router: auth (sha256 key lookup), model
 *                                       routing through a FleetView, prom-client metrics
 *
 * Sends {ready: port} once listening; answers {mem: true} with {rss} after a GC when --expose-gc,
 * {settle: true} with {settled: true} after three full GCs (see settle() in router.bench.ts), and (the
 * stub) {closeIdle: true} with {closedIdle: true} after closing its idle connections and
 * {connections: true} with {connections: {accepted, open}}, its connections so far and now; {cpu: true}
 * with {cpuUs}, the process's user+system CPU time so far in µs (process.cpuUsage(), every thread);
 * {timeLimits: true} with {timingLimits: true} once the limit check is timed (timeLimitCheck), and
 * {limitTimes: true} with {limitTimes: {admits, ends, timerMs}} (each call's duration in ms).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { Pool } from 'undici';
import { createRouterMetrics } from '../src/metrics/router.js';
import type { DemandResult, FleetView, ModelView, ReplicaView } from '../src/reconciler/view.js';
import { buildRouter } from '../src/router/app.js';
import { KeyLimiter, Ticket } from '../src/router/limits.js';
import type { FleetSpec, KeyLimits } from '../src/fleet-spec/types.js';
import { fakeSpec } from '../test/harness/fake-fleet-view.js';
import { startUpstreamStub, type UpstreamStub } from './upstream-stub.js';

export const BENCH_MODEL = 'bench-model';
export const BENCH_ALIAS = 'gpt-bench';
export const BENCH_CLIENT_KEY = 'bench-client-key';

/**
 * Limits that never refuse at any rate this machine reaches (requests_per_minute, tokens_per_minute and
 * concurrency, on the key and on the key × model), so every request pays the whole limit check: both
 * scopes' checks, their sliding windows' bookkeeping, the ticket and its release at the response's close.
 */
export const NEVER_REACHED: KeyLimits = { requestsPerMinute: 100_000_000, tokensPerMinute: 1_000_000_000, concurrency: 100_000 };
/** Keys of the same model beside BENCH_CLIENT_KEY: one holding NEVER_REACHED on the key and the key × model, one without limits (see benchLimits in router.bench.ts). */
export const BENCH_LIMITED_KEY = 'bench-limited-key';
export const BENCH_CONTROL_KEY = 'bench-control-key';

/** A FleetView with one always-ready model: no allocation per request. */
export class StaticFleetView implements FleetView {
  private readonly s: FleetSpec;
  private readonly replicas: readonly ReplicaView[];
  constructor(
    upstream: string,
    readonly engineApiKey: string,
    /** The bench key's limits (access/keys.yaml), to measure the limit check; none by default. */
    limits?: KeyLimits,
  ) {
    this.s = fakeSpec({
      models: { [BENCH_MODEL]: { aliases: [BENCH_ALIAS] }, other: {} },
      keys: [
        { name: 'bench', key: BENCH_CLIENT_KEY, models: [BENCH_MODEL], ...(limits ? { limits, modelLimits: { [BENCH_MODEL]: limits } } : {}) },
        { name: 'bench-limited', key: BENCH_LIMITED_KEY, models: [BENCH_MODEL], limits: NEVER_REACHED, modelLimits: { [BENCH_MODEL]: NEVER_REACHED } },
        { name: 'bench-control', key: BENCH_CONTROL_KEY, models: [BENCH_MODEL] },
        { name: 'someone-else', key: 'another-key', models: ['other'] },
      ],
    });
    // two ready replicas on the same stub (one pool): the router's choice of replica (the affinity key of
    // every chat request, the ring, the last-served table) runs on each request, as for a real model
    // with several replicas
    this.replicas = ['bench-r1', 'bench-r2'].map((id) => ({ id, model: BENCH_MODEL, node: 'local', endpoint: upstream, phase: 'ready' as const, digest: 'd', startedAt: Date.now() }));
  }
  spec(): FleetSpec {
    return this.s;
  }
  model(name: string): ModelView | null {
    const spec = this.s.models[name];
    if (!spec) return null;
    return { name, spec, phase: 'ready', desired: 1, ready: 1, replicas: this.replicas, consecutiveFailures: 0, lastError: null, parked: null, unplaceable: null, nextAttemptAt: null, memoryBytes: null, lastHandledRetry: null };
  }
  readyReplicas(model: string): readonly ReplicaView[] {
    return model === BENCH_MODEL ? this.replicas : [];
  }
  async demand(): Promise<DemandResult> {
    return { kind: 'ready', replicas: this.replicas };
  }
  async waitReady(): Promise<readonly ReplicaView[]> {
    return this.replicas;
  }
  private last = 0;
  hold(): () => void {
    this.touch();
    return () => this.touch();
  }
  touch(): void {
    this.last = Date.now();
  }
}

/** The duration (ms) of each call of the limit check (KeyLimiter.admit, Ticket.end) once timeLimitCheck ran, and what a pair of performance.now() costs (ms). */
const limitTimes = { admits: [] as number[], ends: [] as number[], timerMs: 0 };

/**
 * Times every call of the router's limit check from now on (KeyLimiter.admit and Ticket.end, the two
 * calls a limited key adds to a request): performance.now() around each, kept per call. Also measures
 * what a pair of performance.now() calls costs by itself (timerMs), which every call's time includes.
 */
function timeLimitCheck(): void {
  const admit = KeyLimiter.prototype.admit;
  KeyLimiter.prototype.admit = function (this: KeyLimiter, key: string, model: string, keyLimits: KeyLimits | null, modelLimits: KeyLimits | null) {
    const t0 = performance.now();
    const r = admit.call(this, key, model, keyLimits, modelLimits);
    limitTimes.admits.push(performance.now() - t0);
    return r;
  };
  const end = Ticket.prototype.end;
  Ticket.prototype.end = function (this: Ticket, tokens: number) {
    const t0 = performance.now();
    end.call(this, tokens);
    limitTimes.ends.push(performance.now() - t0);
  };
  const n = 1_000_000;
  let sink = 0;
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const t = performance.now();
    sink += performance.now() - t;
  }
  limitTimes.timerMs = (performance.now() - t0) / n;
  if (sink < 0) throw new Error('the clock went backwards');
}

async function startBare(upstream: string): Promise<number> {
  const pool = new Pool(upstream);
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (req.headers.authorization) headers['authorization'] = req.headers.authorization;
      pool.stream(
        { path: req.url ?? '/', method: 'POST', headers, body: Buffer.concat(parts) },
        ({ statusCode, headers: h }) => {
          const out: Record<string, string> = {};
          if (typeof h['content-type'] === 'string') out['content-type'] = h['content-type'];
          if (typeof h['content-length'] === 'string') out['content-length'] = h['content-length'];
          res.writeHead(statusCode, out);
          return res;
        },
        (err) => {
          if (err && !res.headersSent) {
            res.writeHead(502);
            res.end();
          }
        },
      );
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

async function startRouter(upstream: string, engineKey: string): Promise<number> {
  const app = buildRouter({
    fleet: new StaticFleetView(upstream, engineKey),
    metrics: createRouterMetrics(new Registry()),
    auth: { required: true },
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  app.server.keepAliveTimeout = 60_000;
  return (app.server.address() as AddressInfo).port;
}

async function main(): Promise<void> {
  const [role, upstream, engineKey] = process.argv.slice(2);
  let port: number;
  let stub: UpstreamStub | null = null;
  if (role === 'stub') ({ port } = stub = await startUpstreamStub());
  else if (role === 'bare') port = await startBare(upstream!);
  else if (role === 'router') port = await startRouter(upstream!, engineKey ?? '');
  else throw new Error(`unknown role ${role}`);
  process.on('message', (m: { mem?: boolean; settle?: boolean; closeIdle?: boolean; connections?: boolean; cpu?: boolean; timeLimits?: boolean; limitTimes?: boolean }) => {
    if (m.timeLimits) {
      timeLimitCheck();
      process.send!({ timingLimits: true });
    }
    if (m.limitTimes) process.send!({ limitTimes });
    if (m.cpu) {
      const u = process.cpuUsage();
      process.send!({ cpuUs: u.user + u.system });
    }
    if (m.closeIdle) {
      stub?.closeIdle();
      process.send!({ closedIdle: true });
    }
    if (m.connections) process.send!({ connections: stub?.connections() ?? { accepted: 0, open: 0 } });
    if (m.settle) {
      for (let i = 0; i < 3; i++) (globalThis as { gc?: () => void }).gc?.();
      process.send!({ settled: true });
    }
    if (m.mem) {
      (globalThis as { gc?: () => void }).gc?.();
      const mu = process.memoryUsage();
      process.send!({ rss: mu.rss, heapUsed: mu.heapUsed });
    }
  });
  process.on('disconnect', () => process.exit(0));
  process.send!({ ready: port });
}

if (process.send && ['stub', 'bare', 'router'].includes(process.argv[2] ?? '')) void main();
