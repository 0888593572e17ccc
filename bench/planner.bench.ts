/**
 * A reconcile pass at catalogue scale (#28: steady pass ≤ 50 ms at 10,000 models × 100 nodes).
 * Prints figures; not a test. Two parts, each at every size asked for:
 *
 * 1. planning alone (planPass, pure, no I/O), from an empty fleet and over a running one;
 * 2. the whole Reconciler pass, driven the way test/unit/reconciler-shell.test.ts drives the real
 *    shell — fake nodes (test/harness/fake-node.ts) that answer every look with fresh objects, as a
 *    node's JSON does — on a real fleet spec loaded from files, a real state file (StateStore) and
 *    the snapshot's listeners a `serve` has (metrics, the HA publication's entries, the events
 *    feed). Several passes on an unchanged world, each split into its phases by timing the ports the
 *    shell calls: sync (the tracker), observe (the nodes), memory + ownership, busy (GET /slots),
 *    decide + apply (to the state save), then what follows `durationMs`: the state save (the local
 *    file, and the etcd layout's entries as the HA store builds them), the snapshot and its
 *    listeners. "pass" is lastPass.durationMs; "whole" is the request's wall time, all of it.
 *
 *   npm run bench:planner [-- models,… nodes]   (node --expose-gc dist/bench/planner.bench.js …)
 *   (default: 1000,10000 models on 100 nodes; PASS_ONLY=1: the whole pass only, PASSES=n: n passes, for a profile)
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pino from 'pino';
import type { NodeObservation, ReplicaObservation } from '../src/nodes/driver.js';
import { initialHealth } from '../src/reconciler/health.js';
import { planPass, type ObservedNode } from '../src/reconciler/planner.js';
import type { FleetSpec } from '../src/fleet-spec/types.js';
import { dirFiles } from '../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../src/fleet-spec/load.js';
import { Reconciler } from '../src/reconciler/reconciler.js';
import { emptyState, type ControllerState } from '../src/reconciler/state.js';
import { StateStore } from '../src/reconciler/state-store.js';
import { stateEntries } from '../src/ha/state-layout.js';
import { publishedEntries, publishedOf } from '../src/ha/published.js';
import { createMetrics } from '../src/metrics/index.js';
import { deriveEvents } from '../src/events/derive.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers } from '../test/harness/fake-node.js';
import { FixedSpec } from '../test/harness/fixed-spec.js';
import { tempFleet, type FleetFilesMap } from '../test/harness/fleet.js';
import { writeTinyModel, type TinyModelFile } from '../test/fixtures/gguf.js';

const sizes = (process.argv[2] ?? '1000,10000').split(',').map(Number);
const nodeCount = Number(process.argv[3] ?? 100);
const GiB = 2 ** 30;
const SHA = 'a'.repeat(64);
const HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvVj2GfUu1xJ1u3u9QmTq2l1nq8mQnJ6zq3l9nG7Y0a';

const nodeName = (i: number): string => `cpu-${String(i).padStart(3, '0')}`;
const modelName = (i: number): string => `m-${String(i).padStart(5, '0')}`;
/** One model in five always on (1–3 replicas), the others on demand; one on-demand model in ten in use. */
const alwaysOn = (i: number): boolean => i % 5 === 0;
const replicasOf = (i: number): number => (alwaysOn(i) ? 1 + (i % 3) : i % 10 === 1 ? 1 : 0);

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * The fleet repo's files: `models` models on `nodes` nodes of 256 GiB. Half the models set their
 * memory; the other half have it estimated from their GGUF's header (a tiny one on the controller).
 */
function fleetFiles(models: number, nodes: number, gguf: TinyModelFile): FleetFilesMap {
  const f: FleetFilesMap = {
    'fleet.yaml': 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1h\n',
    'engines/llama-cpp.yaml': 'versions:\n  b6500:\n    path: /opt/llama/b6500/llama-server\n',
    'profiles/chat.yaml': 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\n',
  };
  for (let i = 0; i < nodes; i++) f[`nodes/${nodeName(i)}.yaml`] = `host: 10.0.${i >> 8}.${i & 255}\nhost_key: ${HOST_KEY}\nidentity: fleet-key\nlabels: { zone: ${i % 2 ? 'a' : 'b'} }\ncapacity: { memory: 256GiB }\n`;
  for (let i = 0; i < models; i++) {
    const scaling = alwaysOn(i) ? `replicas: ${replicasOf(i)}` : 'on_demand: { idle_timeout: 1h }';
    const selector = i % 7 === 0 ? 'node_selector: { zone: a }\n' : '';
    const file = i % 2 ? `source: file://${gguf.path}\nsha256: ${gguf.sha256}\n` : `source: hf://org/${modelName(i)}/f.gguf\nsha256: ${SHA}\nmemory: ${1 + (i % 3)}GiB\n`;
    f[`models/${modelName(i)}.yaml`] = `${file}profile: chat\n${scaling}\n${selector}`;
  }
  return f;
}

async function loadSpec(models: number, nodes: number, gguf: TinyModelFile): Promise<FleetSpec> {
  const t = tempFleet(fleetFiles(models, nodes, gguf));
  try {
    const r = await loadFleetSpec(dirFiles(t.dir), 'rev1');
    if (!r.ok) throw new Error(JSON.stringify(r.problems.slice(0, 3)));
    return r.spec;
  } finally {
    t.cleanup();
  }
}

/** The running fleet: each model's replicas, ready, spread over the nodes its selector allows. */
function runningReplicas(spec: FleetSpec): Map<string, ReplicaObservation[]> {
  const byNode = new Map<string, ReplicaObservation[]>();
  const names = Object.keys(spec.nodes).sort();
  let k = 0;
  Object.values(spec.models).forEach((m) => {
    const i = Number(m.name.slice(2));
    for (let r = 0; r < replicasOf(i); r++) {
      let node = names[k++ % names.length]!;
      while (!Object.entries(m.nodeSelector).every(([key, v]) => spec.nodes[node]!.labels[key] === v)) node = names[k++ % names.length]!;
      const list = byNode.get(node) ?? [];
      const id = `${m.name}-r${r}`;
      list.push({ id, model: m.name, digest: m.digest, port: 20000 + list.length, pid: 1000 + list.length, startedAt: 1, endpoint: `http://${node}:${20000 + list.length}`, state: 'ready' });
      byNode.set(node, list);
    }
  });
  return byNode;
}

// ------------------------------------------------------------------ part 1: planning alone

function planningAlone(spec: FleetSpec, running: Map<string, ReplicaObservation[]>): void {
  const health = Object.fromEntries(Object.values(spec.models).map((m) => [m.name, initialHealth(m.digest)]));
  const memory = Object.fromEntries(Object.values(spec.models).map((m) => [m.name, m.memoryBytes ?? 2 * GiB]));
  const inUse = [...running.values()].flat().filter((r) => spec.models[r.model]!.scaling.mode === 'on_demand');
  const demand = Object.fromEntries(inUse.map((r) => [r.model, { lastRequestAt: 1e12 - 1000 }]));
  const observe = (withReplicas: boolean): ObservedNode[] =>
    Object.keys(spec.nodes).map((name) => ({ name, reachable: true, memoryTotalBytes: 256 * GiB, replicas: withReplicas ? (running.get(name) ?? []) : [] }));
  const models = Object.keys(spec.models).length;
  for (const [label, observed] of [['plan from an empty fleet', observe(false)], ['plan over a running fleet (steady)', observe(true)]] as const) {
    let n = 0;
    const run = (): number =>
      planPass({ spec, nodes: observed, health, inflightStarts: [], stopping: new Set(), demand, restarts: new Set(), draining: {}, memory, accountedFailures: new Set(), now: 1e12, newReplicaId: (m) => `${m}-${n++}` }).actions.length;
    run();
    const times: number[] = [];
    let actions = 0;
    for (let i = 0; i < 9; i++) {
      const t0 = performance.now();
      actions = run();
      times.push(performance.now() - t0);
    }
    console.log(`  ${label.padEnd(36)} median ${median(times).toFixed(1)} ms (${((median(times) / models) * 1000).toFixed(1)} µs per model), ${actions} actions`);
  }
}

// ------------------------------------------------------------------ part 2: the whole pass

/** A fake node whose every look answers with fresh objects (a real node's answer is parsed JSON). */
class FreshNode extends FakeNode {
  constructor(name: string, clock: FakeClock, private readonly stamp: Stamps) {
    super(name, clock, new FakeFleetLog(), new Set());
  }
  override async observe(): Promise<NodeObservation> {
    this.stamp.mark('observeStart');
    const o = await super.observe();
    this.stamp.mark('observeEnd');
    return { ...o, replicas: o.replicas.map((r) => ({ ...r })) };
  }
}

/** When each port was first and last called in the pass running now. */
class Stamps {
  readonly first = new Map<string, number>();
  readonly last = new Map<string, number>();
  readonly spent = new Map<string, number>();
  mark(what: string): void {
    const t = performance.now();
    if (!this.first.has(what)) this.first.set(what, t);
    this.last.set(what, t);
  }
  timed<T>(what: string, fn: () => T): T {
    const t0 = performance.now();
    try {
      return fn();
    } finally {
      this.spent.set(what, (this.spent.get(what) ?? 0) + performance.now() - t0);
    }
  }
  reset(): void {
    this.first.clear();
    this.last.clear();
    this.spent.clear();
  }
}

const PHASES = ['pass', 'whole', 'sync', 'observe', 'memory+own', 'busy', 'decide+apply', 'save file', 'state entries', 'snapshot', 'metrics', 'published', 'events'] as const;
type Phase = (typeof PHASES)[number];

async function wholePass(spec: FleetSpec, running: Map<string, ReplicaObservation[]>): Promise<{ phases: Record<Phase, number>; sameRecord: number; steady: number; heapMB: number }> {
  const stamp = new Stamps();
  const fakeClock = new FakeClock();
  const nodes = new Map(Object.keys(spec.nodes).map((n) => [n, new FreshNode(n, fakeClock, stamp)]));
  for (const [node, list] of running) for (const r of list) nodes.get(node)!.replicas.set(r.id, r);
  const tracker = new FixedSpec(spec);
  const refresh = tracker.refresh.bind(tracker);
  tracker.refresh = async () => {
    stamp.mark('syncStart');
    const r = await refresh();
    stamp.mark('syncEnd');
    return r;
  };
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-pass-bench-'));
  const file = new StateStore(join(dir, 'state.json'));
  let lastSaved: ControllerState | null = null;
  /** Steady passes that saved the very record the pass before saved (an unchanged world keeps its record). */
  let sameRecord = 0;
  let passNo = 0;
  const r = new Reconciler({
    tracker,
    status: null,
    driverFor: (n) => nodes.get(n.name)!,
    stateStore: {
      path: file.path,
      save: async (s: ControllerState) => {
        if (s === lastSaved && passNo >= 3 && !stamp.first.has('save')) sameRecord++;
        stamp.mark('save');
        lastSaved = s;
        stamp.timed('state entries', () => stateEntries(s));
        const t0 = performance.now();
        const wrote = await file.save(s);
        stamp.spent.set('save file', performance.now() - t0);
        return wrote;
      },
    },
    initialState: emptyState,
    engineApiKey: 'k',
    logger: pino({ level: 'silent' }),
    timers: new FakeTimers(fakeClock),
    inFlight: async () => {
      stamp.mark('busy');
      return 0;
    },
  });
  const metrics = createMetrics({ defaultMetrics: false });
  r.onSnapshot((s) => stamp.timed('metrics', () => metrics.applySnapshot(s)));
  r.onSnapshot((s) => stamp.timed('published', () => publishedEntries(publishedOf(s))));
  let prev = r.snapshot();
  r.onSnapshot((s) => stamp.timed('events', () => {
    deriveEvents(prev, s);
    prev = s;
  }));
  // on-demand models in use had requests (the router's touch): they stay up
  for (const list of running.values()) for (const x of list) if (spec.models[x.model]!.scaling.mode === 'on_demand') r.touch(x.model);

  const rows: Record<Phase, number>[] = [];
  for (let pass = 0; pass < Number(process.env['PASSES'] ?? 13); pass++) {
    stamp.reset();
    passNo = pass;
    const t0 = performance.now();
    await r.requestPass('bench');
    const whole = performance.now() - t0;
    passNo = -1; // saves between passes (a request's demand, stop()) are not counted
    const last = r.snapshot().lastPass!;
    if (last.result !== 'ok') throw new Error(`pass ${pass} failed: ${JSON.stringify(last.error)}`);
    if (pass >= 3 && last.actions > 0) throw new Error(`pass ${pass} on an unchanged world planned ${last.actions} actions`);
    const f = (k: string): number => stamp.first.get(k) ?? NaN;
    const l = (k: string): number => stamp.last.get(k) ?? NaN;
    const spent = (k: string): number => stamp.spent.get(k) ?? 0;
    const busyEnd = stamp.last.has('busy') ? l('busy') : l('observeEnd');
    const listeners = spent('metrics') + spent('published') + spent('events');
    rows.push({
      pass: last.durationMs,
      whole,
      sync: l('syncEnd') - f('syncStart'),
      observe: l('observeEnd') - f('observeStart'),
      'memory+own': (stamp.first.get('busy') ?? busyEnd) - l('observeEnd'),
      busy: busyEnd - (stamp.first.get('busy') ?? busyEnd),
      'decide+apply': f('save') - busyEnd,
      'save file': spent('save file'),
      'state entries': spent('state entries'),
      snapshot: t0 + whole - f('save') - spent('save file') - spent('state entries') - listeners,
      metrics: spent('metrics'),
      published: spent('published'),
      events: spent('events'),
    });
  }
  // what the controller holds after the passes (with --expose-gc: a full collection first, else garbage included)
  (globalThis as { gc?: () => void }).gc?.();
  const heapMB = process.memoryUsage().heapUsed / 2 ** 20;
  await r.stop();
  rmSync(dir, { recursive: true, force: true });
  const steady = rows.slice(3);
  return { phases: Object.fromEntries(PHASES.map((p) => [p, median(steady.map((x) => x[p]))])) as Record<Phase, number>, sameRecord, steady: steady.length, heapMB };
}

const ggufDir = mkdtempSync(join(tmpdir(), 'llmgw-pass-bench-gguf-'));
const gguf = await writeTinyModel(join(ggufDir, 'tiny.gguf'));
for (const models of sizes) {
  const t0 = performance.now();
  const spec = await loadSpec(models, nodeCount, gguf);
  const running = runningReplicas(spec);
  const replicas = [...running.values()].reduce((n, l) => n + l.length, 0);
  console.log(`${models} models, ${nodeCount} nodes, ${replicas} replicas running (spec loaded in ${(performance.now() - t0).toFixed(0)} ms)`);
  if (!process.env['PASS_ONLY']) planningAlone(spec, running);
  const { phases: w, sameRecord, steady, heapMB } = await wholePass(spec, running);
  console.log(`  whole Reconciler pass, steady (median of ${steady} passes after 3; ${sameRecord} of them saved the same record object): pass (durationMs) ${w.pass.toFixed(1)} ms, whole request ${w.whole.toFixed(1)} ms (target: pass ≤ 50 ms at 10,000)`);
  console.log(`    ${PHASES.slice(2).map((p) => `${p} ${w[p].toFixed(1)}`).join(' · ')} (ms)`);
  console.log(`    heap in use after the passes, the controller running: ${heapMB.toFixed(0)} MB${'gc' in globalThis ? ' (after a full GC)' : ' (run with --expose-gc for what is live)'}`);
}
rmSync(ggufDir, { recursive: true, force: true });
