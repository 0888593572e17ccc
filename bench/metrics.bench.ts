/**
 * `/metrics` at catalogue scale: the exposition's bytes and series, and the event-loop time of a
 * scrape, for N models of which only a few had traffic (the case #28 measured: on-demand models
 * that are rarely asked for). Times are medians of 7 scrapes on a shared machine: read them as a
 * ratio against the baseline measured in the same run (rendering every series at every scrape).
 *
 *   npm run bench:metrics [-- 1000 10000]
 */
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { createMetrics } from '../src/metrics/index.js';
import { STANDALONE, type FleetSnapshot, type ModelView, type NodeView } from '../src/reconciler/view.js';
import type { ModelSpec } from '../src/fleet-spec/types.js';

const counts = process.argv.slice(2).map(Number).filter((n) => n > 0);
const sizes = counts.length ? counts : [1000, 10_000];

function model(i: number): ModelView {
  const name = `m-${i}`;
  const onDemand = i % 3 === 0;
  const spec = {
    name, file: `models/${name}.yaml`, source: `hf://org/${name}/${name}.gguf`, sha256: 'a'.repeat(64), profile: 'chat',
    scaling: onDemand ? { mode: 'on_demand', idleTimeoutMs: 900_000 } : { mode: 'replicas', replicas: 1 },
    aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null, routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token: null, digest: `d${i}`,
  } as unknown as ModelSpec;
  return { name, spec, phase: onDemand ? 'idle' : 'ready', desired: onDemand ? 0 : 1, ready: onDemand ? 0 : 1, replicas: [], consecutiveFailures: 0, lastError: null, parked: null, unplaceable: null, nextAttemptAt: null, memoryBytes: null, lastHandledRetry: null } as ModelView;
}
const node = (i: number): NodeView => ({ name: `node-${i}`, reachable: true, error: null, memory: { totalBytes: 2 ** 36, availableBytes: 2 ** 35 }, diskFreeBytes: null, engines: ['llama-cpp@b5000'], engineInstallFailures: {}, replicas: 0 }) as NodeView;

function snapshot(models: number): FleetSnapshot {
  return {
    at: Date.now(), leader: true, control: STANDALONE, appliedRevision: 'rev1', specValid: true, rejected: null, lastSyncOk: Date.now(), lastSyncError: null,
    lastStatusWriteOk: Date.now(), stateError: null, models: Array.from({ length: models }, (_, i) => model(i)), nodes: Array.from({ length: 100 }, (_, i) => node(i)), lastPass: null,
  } as FleetSnapshot;
}

const median = async (run: () => Promise<unknown>): Promise<number> => {
  const times: number[] = [];
  for (let r = 0; r < 7; r++) {
    const t = performance.now();
    await run();
    times.push(performance.now() - t);
  }
  return times.sort((a, b) => a - b)[3]!;
};

/** The longest the event loop was held while `run` ran (ms; 1 ms resolution). */
async function longestBlock(run: () => Promise<unknown>): Promise<number> {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await run();
  await new Promise((r) => setImmediate(r));
  h.disable();
  return h.max / 1e6;
}

async function measure(models: number): Promise<{ bytes: number; series: number; ms: number; fullMs: number; applyMs: number; changedMs: number; changedBlockMs: number }> {
  const m = createMetrics({ defaultMetrics: false });
  const s = snapshot(models);
  const t0 = performance.now();
  m.applySnapshot(s);
  const firstMs = performance.now() - t0;
  // A steady pass: the next snapshot, with nothing changed.
  const t1 = performance.now();
  m.applySnapshot({ ...s, at: s.at + 1000 });
  const applyMs = performance.now() - t1;
  void firstMs;
  // Ten models had traffic.
  for (let i = 0; i < Math.min(10, models); i++) {
    m.router.request(`m-${i}`, 200, 0.3, '');
    m.router.timeToFirstToken(`m-${i}`, 0.05);
  }
  const body = (await m.scrape()).body;
  const ms = await median(() => m.scrape());
  // Baseline: every series rendered at every scrape (what a scrape cost before the fleet's text was kept).
  const fullMs = await median(() => m.registry.metrics());
  const series = body.split('\n').filter((l) => l && !l.startsWith('#')).length;
  // One model changed: the next scrape renders every model's series again (model-series.ts, in slices).
  // As /metrics sends it: the parts, not one string.
  let k = 0;
  const change = (): void => m.applySnapshot({ ...s, at: s.at + 2000 + k, models: s.models.map((x, i) => (i === 0 ? { ...x, consecutiveFailures: ++k } : x)) });
  const times: number[] = [];
  const blocks: number[] = [];
  for (let r = 0; r < 7; r++) {
    change();
    const t = performance.now();
    await m.scrapeParts();
    times.push(performance.now() - t);
    change();
    blocks.push(await longestBlock(() => m.scrapeParts()));
  }
  const changedMs = times.sort((a, b) => a - b)[3]!;
  const changedBlockMs = blocks.sort((a, b) => a - b)[3]!;
  return { bytes: Buffer.byteLength(body), series, ms, fullMs, applyMs, changedMs, changedBlockMs };
}

for (const n of sizes) {
  const r = await measure(n);
  console.log(
    `${String(n).padStart(6)} models × 100 nodes, 10 with traffic: ${(r.bytes / 1e6).toFixed(2)} MB, ${r.series} series; scrape ${r.ms.toFixed(1)} ms against ${r.fullMs.toFixed(1)} ms rendering everything (${(r.ms / r.fullMs).toFixed(2)} ×); applySnapshot of an unchanged fleet ${r.applyMs.toFixed(1)} ms per pass; the scrape after one model changed ${r.changedMs.toFixed(1)} ms in all, the loop held at most ${r.changedBlockMs.toFixed(1)} ms at a time (${(r.changedBlockMs / r.fullMs).toFixed(2)} × rendering everything at once)`,
  );
}
