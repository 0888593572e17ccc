/**
 * One pass's planning time for 1,000 models on 100 nodes (no I/O: the planner is pure).
 * Target: well under 100 ms per pass. Prints figures; not a test.
 *
 *   npm run build && node dist/bench/planner.bench.js [models] [nodes]
 */
import { performance } from 'node:perf_hooks';
import type { ReplicaObservation } from '../src/nodes/driver.js';
import { initialHealth } from '../src/reconciler/health.js';
import { planPass, type ObservedNode } from '../src/reconciler/planner.js';
import type { FleetSpec, ModelSpec, NodeSpec } from '../src/fleet-spec/types.js';

const modelCount = Number(process.argv[2] ?? 1000);
const nodeCount = Number(process.argv[3] ?? 100);
const GiB = 2 ** 30;

const nodes: Record<string, NodeSpec> = {};
for (let i = 0; i < nodeCount; i++) {
  const name = `cpu-${String(i).padStart(3, '0')}`;
  nodes[name] = { name, file: `nodes/${name}.yaml`, transport: 'ssh', host: `10.0.${i >> 8}.${i & 255}`, port: 22, user: 'llmgw', hostKey: null, identity: 'k', labels: { zone: i % 2 ? 'a' : 'b' }, capacity: { memoryBytes: 256 * GiB, cpus: 64 }, dataDir: '/var/lib/llmgw', ports: { from: 20000, to: 20999 } };
}
const models: Record<string, ModelSpec> = {};
for (let i = 0; i < modelCount; i++) {
  const name = `m-${i}`;
  models[name] = {
    name, file: `models/${name}.yaml`, source: `hf://org/${name}/f.gguf`, sha256: 'a'.repeat(64), profile: 'p', aliases: [], nodeSelector: i % 5 === 0 ? { zone: 'a' } : {},
    scaling: i % 4 === 0 ? { mode: 'on_demand', idleTimeoutMs: 900_000, maxReplicas: 1 } : { mode: 'replicas', replicas: 1 + (i % 3) },
    memoryBytes: (2 + (i % 7)) * GiB, maxConcurrency: null, routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token: null, digest: `d${i}`,
  };
}
const spec = { revision: 'r', settings: { placementReserveBytes: GiB, drainGraceMs: 300_000 }, nodes, engines: {}, profiles: {}, models, access: { keys: [], file: null }, modelNames: {} } as unknown as FleetSpec;
const health = Object.fromEntries(Object.values(models).map((m) => [m.name, initialHealth(m.digest)]));
const memory = Object.fromEntries(Object.values(models).map((m) => [m.name, m.memoryBytes]));

function observe(withReplicas: boolean): ObservedNode[] {
  const byNode = new Map<string, ReplicaObservation[]>();
  if (withReplicas) {
    let k = 0;
    for (const m of Object.values(models)) {
      if (m.scaling.mode !== 'replicas') continue;
      for (let r = 0; r < m.scaling.replicas; r++) {
        const node = `cpu-${String(k++ % nodeCount).padStart(3, '0')}`;
        const list = byNode.get(node) ?? [];
        list.push({ id: `${m.name}-${r}`, model: m.name, digest: m.digest, port: 20000 + list.length, pid: 1, startedAt: 0, endpoint: '', state: 'ready' });
        byNode.set(node, list);
      }
    }
  }
  return Object.keys(nodes).map((name) => ({ name, reachable: true, memoryTotalBytes: 256 * GiB, replicas: byNode.get(name) ?? [] }));
}

function bench(label: string, observed: ObservedNode[]): void {
  let n = 0;
  const run = (): number =>
    planPass({ spec, nodes: observed, health, inflightStarts: [], stopping: new Set(), demand: {}, restarts: new Set(), draining: {}, memory, accountedFailures: new Set(), now: 1e12, newReplicaId: (m) => `${m}-${n++}` }).actions.length;
  run();
  const times: number[] = [];
  let actions = 0;
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    actions = run();
    times.push(performance.now() - t0);
  }
  times.sort((a, b) => a - b);
  const median = times[10]!;
  console.log(`${label.padEnd(34)} ${modelCount} models, ${nodeCount} nodes: median ${median.toFixed(2)} ms per pass, ${((median / modelCount) * 1000).toFixed(1)} µs per model, ${actions} actions (target: well under 100 ms)`);
}

bench('plan from an empty fleet', observe(false));
bench('plan over a running fleet (steady)', observe(true));
