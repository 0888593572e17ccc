/**
 * Scale (#28): a fleet of N on-demand models on one local node, run by the real `llmgw serve` and
 * measured through its public interface only (HTTP, the CLI, /proc) — /metrics bytes and time per
 * scrape, controller RSS and V8 heap after start and after 5 activations (real llama-server on a tiny
 * GGUF), GET /admin/v1/models, `ctl status`, `llmgw validate` wall time — plus the in-process fleet
 * load and a status-branch write of N files (real git objects). Every figure is also taken for a
 * 10-model fleet in the same run, and printed as a ratio to it (validate: to a bare `node -e ''`).
 *
 *   npm run bench:scale                          (1,000 models)
 *   SCALE_MODELS=1000,10000 npm run bench:scale  (each size in turn)
 *   SCALE_ACTIVATIONS=0 …                        (skip the activations)
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dirFiles } from '../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../src/fleet-spec/load.js';
import { TreeCache, writeFilesTree } from '../src/git/status-branch.js';
import { repoRoot } from '../test/harness/paths.js';
import { chatOnce, makeScaleFleet, sampleOf, serveScaleFleet, waitFor, type ScaleServe } from '../test/harness/scale-fleet.js';

const SIZES = (process.env['SCALE_MODELS'] ?? '1000').split(',').map(Number);
const ACTIVATIONS = Number(process.env['SCALE_ACTIVATIONS'] ?? 5);
const BASELINE = 10;
const cli = join(repoRoot, 'bin', 'llmgw.js');

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timed<T>(fn: () => Promise<T> | T): Promise<[number, T]> {
  const t0 = performance.now();
  const v = await fn();
  return [performance.now() - t0, v];
}

function wallMs(args: readonly string[], runs = 3): number {
  const times: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const t0 = performance.now();
    const r = spawnSync(process.execPath, args, { stdio: 'ignore' });
    if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${r.status}`);
    if (i > 0) times.push(performance.now() - t0); // the first run warms the file cache
  }
  return median(times);
}

interface Figures {
  [figure: string]: number;
}

/** The controller's RSS (/proc) and V8 heap in use (its own /metrics), in MB. */
async function memory(s: ScaleServe): Promise<{ rss: number; heap: number }> {
  const text = await (await fetch(`${s.adminUrl}/metrics`)).text();
  return { rss: s.rssBytes() / 2 ** 20, heap: sampleOf(text, 'nodejs_heap_size_used_bytes') / 2 ** 20 };
}

async function measure(n: number): Promise<Figures> {
  const f: Figures = {};
  const fleet = await makeScaleFleet(n, { hot: false });
  let serve: ScaleServe | null = null;
  try {
    f['validate wall ms'] = wallMs([cli, 'validate', fleet.fleetDir]);
    await loadFleetSpec(dirFiles(fleet.fleetDir), null); // warm-up
    const loads: number[] = [];
    for (let i = 0; i < 3; i++) loads.push((await timed(() => loadFleetSpec(dirFiles(fleet.fleetDir), null)))[0]);
    f['load in-process ms'] = median(loads);

    const t0 = performance.now();
    const s = (serve = await serveScaleFleet(fleet));
    const status = async (): Promise<{ lastPass: { durationMs: number } | null }> => (await fetch(`${s.adminUrl}/admin/v1/status`)).json() as Promise<{ lastPass: { durationMs: number } | null }>;
    const first = await waitFor('the first pass', 300_000, s, async () => (await status()).lastPass);
    f['start to first pass ms'] = performance.now() - t0;
    f['first pass ms'] = first.durationMs;
    await new Promise((r) => setTimeout(r, 3000)); // settle: observations, the status branch
    const m0 = await memory(s);
    f['RSS after start MB'] = m0.rss;
    f['heap after start MB'] = m0.heap;

    const scrapes: number[] = [];
    for (let i = 0; i <= 5; i++) {
      const [ms, text] = await timed(async () => (await fetch(`${s.adminUrl}/metrics`)).text());
      if (i > 0) scrapes.push(ms);
      f['/metrics MB'] = text.length / 1e6;
    }
    f['/metrics scrape ms'] = median(scrapes);
    const models: number[] = [];
    for (let i = 0; i < 3; i++) {
      const [ms, text] = await timed(async () => (await fetch(`${s.adminUrl}/admin/v1/models`)).text());
      models.push(ms);
      f['GET /models kB'] = text.length / 1e3;
    }
    f['GET /models ms'] = median(models);
    f['GET /models?limit=50 ms'] = (await timed(async () => (await fetch(`${s.adminUrl}/admin/v1/models?phase=idle&limit=50`)).text()))[0];
    f['ctl status wall ms'] = wallMs([cli, 'ctl', 'status', '--server', s.adminUrl]);

    if (ACTIVATIONS > 0) {
      const starts: number[] = [];
      for (const model of fleet.onDemand.slice(0, ACTIVATIONS)) {
        const r = await chatOnce(s.routerUrl, model);
        if (r.status !== 200) throw new Error(`activating ${model}: HTTP ${r.status}\n${s.out().slice(-3000)}`);
        starts.push(r.ms);
      }
      f['activation ms (median)'] = median(starts);
      await new Promise((r) => setTimeout(r, 3000));
      const m1 = await memory(s);
      f[`RSS after ${ACTIVATIONS} activations MB`] = m1.rss;
      f[`heap after ${ACTIVATIONS} activations MB`] = m1.heap;
    }
    const p = (await status()).lastPass;
    f['steady pass ms'] = p?.durationMs ?? NaN;
  } finally {
    await serve?.stop();
    fleet.cleanup();
  }
  Object.assign(f, await statusBranch(n));
  return f;
}

/** One write of N status files into a real git object store, then one with a single file changed (the writer's TreeCache). */
async function statusBranch(n: number): Promise<Figures> {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-scale-status-'));
  try {
    execFileSync('git', ['init', '-q', '--bare', dir]);
    const files: Record<string, string> = {};
    for (let i = 0; i < n; i++) files[`models/m-${i}.json`] = JSON.stringify({ name: `m-${i}`, phase: 'idle', desired: 0, ready: 0, replicas: [], lastError: null }, null, 2) + '\n';
    const cache = new TreeCache(dir);
    const [cold] = await timed(() => writeFilesTree(dir, files, cache));
    files['models/m-0.json'] = files['models/m-0.json']!.replace('"idle"', '"ready"');
    const [warm] = await timed(() => writeFilesTree(dir, files, cache));
    return { 'status branch: N files, cold ms': cold, 'status branch: 1 changed, ms': warm };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const bare = wallMs(['-e', '']);
console.log(`bench:scale — ${SIZES.join(', ')} on-demand models on one local node, baseline ${BASELINE} models; node -e '' ${bare.toFixed(0)} ms wall`);
const base = await measure(BASELINE);
for (const n of SIZES) {
  const t0 = performance.now();
  const at = await measure(n);
  console.log(`\n${'figure'.padEnd(34)} ${`${BASELINE} models`.padStart(12)} ${`${n} models`.padStart(14)} ${'ratio'.padStart(8)}`);
  for (const [k, v] of Object.entries(at)) {
    const b = base[k] ?? NaN;
    console.log(`${k.padEnd(34)} ${b.toFixed(1).padStart(12)} ${v.toFixed(1).padStart(14)} ${(v / b).toFixed(2).padStart(8)}`);
  }
  console.log(`llmgw validate at ${n}: ${(at['validate wall ms']! / bare).toFixed(1)} × a bare node start (goal ≤ 500 ms wall at 1,000); load in-process goal ≤ 150 ms`);
  console.log(`(${((performance.now() - t0) / 1000).toFixed(0)} s for ${n} models)`);
}
