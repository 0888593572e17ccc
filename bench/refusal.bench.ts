/**
 * Refusal latency through the real router and a real controller: how long a client waits to be told
 * "no" for a parked model and for an unplaceable one, side by side (the parked refusal is the
 * baseline, measured in the same run). The controller reads a real git fleet repo and observes a
 * real local node (the `local` transport: a shell on this machine), so a refusal that needed a full
 * reconcile pass would pay for a git sync and a node observation; a fresh in-memory placement does not.
 *
 *   npm run bench:refusal      (also run at the end of npm run bench:router)
 */
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { Registry } from 'prom-client';
import { request } from 'undici';
import { FleetRepo } from '../src/git/repo.js';
import { SpecTracker } from '../src/git/tracker.js';
import { createRouterMetrics } from '../src/metrics/router.js';
import { openNodeDriver } from '../src/nodes/shell-driver.js';
import { initialHealth } from '../src/reconciler/health.js';
import { Reconciler } from '../src/reconciler/reconciler.js';
import { emptyState } from '../src/reconciler/state.js';
import { buildRouter } from '../src/router/app.js';

const ROUNDS = 5;
const PER_ROUND = 100;
const SHA = 'a'.repeat(64);

function git(dir: string, ...args: string[]): void {
  const r = spawnSync('git', ['-C', dir, '-c', 'user.name=bench', '-c', 'user.email=bench@example.invalid', ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
}

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'llmgw-refusal-bench-'));
  const repoDir = join(root, 'fleet');
  const files: Record<string, string> = {
    'fleet.yaml': 'poll_interval: 1h\n',
    'nodes/local.yaml': `transport: local\ndata_dir: ${join(root, 'node')}\nports: { from: 39000, to: 39099 }\n`,
    'engines/llama-cpp.yaml': 'versions:\n  b1:\n    path: /nonexistent/llama-server\n',
    'profiles/tiny.yaml': 'engine: llama-cpp@b1\nctx_size: 256\n',
    'models/parked.yaml': `source: file:///nonexistent/parked.gguf\nsha256: ${SHA}\nprofile: tiny\nreplicas: 1\nmemory: 1GiB\n`,
    'models/huge.yaml': `source: file:///nonexistent/huge.gguf\nsha256: ${SHA}\nprofile: tiny\non_demand: { idle_timeout: 10m }\nmemory: 16TiB\n`,
  };
  for (const [p, c] of Object.entries(files)) {
    mkdirSync(join(repoDir, p, '..'), { recursive: true });
    writeFileSync(join(repoDir, p), c);
  }
  git(root, 'init', '-q', '-b', 'main', repoDir);
  git(repoDir, 'add', '-A');
  git(repoDir, 'commit', '-qm', 'bench fleet');

  const repo = new FleetRepo({ path: repoDir });
  const tracker = new SpecTracker(repo);
  const first = await tracker.refresh();
  if (!tracker.applied) throw new Error(`the bench fleet did not load: ${first.error?.message ?? JSON.stringify(tracker.rejected?.problems)}`);
  const spec = tracker.applied.spec;
  // the parked model is parked in the record the controller starts from
  const kev = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
  const parked = { ...initialHealth(spec.models.parked!.digest), consecutiveFailures: 5, lastError: kev, parked: { since: Date.now(), lastError: kev } };
  const reconciler = new Reconciler({
    tracker,
    status: null,
    driverFor: (n) => openNodeDriver(n, { secretsDir: root }),
    stateStore: { path: join(root, 'state.json'), save: async () => true },
    initialState: { ...emptyState, models: { parked: { health: parked } } },
    engineApiKey: 'bench-engine-key',
    logger: pino({ level: 'silent' }),
  });
  await reconciler.start();
  const router = buildRouter({ fleet: reconciler, metrics: createRouterMetrics(new Registry()), logger: pino({ level: 'silent' }), auth: { required: false } });
  await router.listen({ host: '127.0.0.1', port: 0 });
  const url = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1/chat/completions`;

  const refuse = async (model: string, want: string): Promise<number> => {
    const t0 = performance.now();
    const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] }) });
    const body = (await r.body.json()) as { error?: { code?: string } };
    const ms = performance.now() - t0;
    if (body.error?.code !== want) throw new Error(`${model}: expected ${want}, got ${r.statusCode} ${JSON.stringify(body)}`);
    return ms;
  };
  // a full pass, for scale: what a refusal cost when it waited for one
  const passes: number[] = [];
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now();
    await reconciler.requestPass('bench');
    passes.push(performance.now() - t0);
  }

  const lat = { parked: [] as number[], unplaceable: [] as number[] };
  for (let i = 0; i < 20; i++) await Promise.all([refuse('parked', 'model_parked'), refuse('huge', 'model_unplaceable')]); // warm-up
  const lastPassBefore = reconciler.snapshot().lastPass?.startedAt;
  for (let round = 0; round < ROUNDS; round++) {
    // interleaved slices, so a change in machine speed lands on both alike
    for (let i = 0; i < PER_ROUND; i++) lat.parked.push(await refuse('parked', 'model_parked'));
    for (let i = 0; i < PER_ROUND; i++) lat.unplaceable.push(await refuse('huge', 'model_unplaceable'));
  }

  const row = (name: string, xs: number[]): string => `${name.padEnd(26)} ${pct(xs, 50).toFixed(3).padStart(8)} ${pct(xs, 95).toFixed(3).padStart(8)} ${String(xs.length).padStart(6)}`;
  console.log(`refusal latency through the router, real controller (git repo + local node), ${ROUNDS} rounds × ${PER_ROUND} each`);
  console.log(`${'answer'.padEnd(26)} ${'p50 ms'.padStart(8)} ${'p95 ms'.padStart(8)} ${'n'.padStart(6)}`);
  console.log(row('parked (baseline)', lat.parked));
  console.log(row('unplaceable', lat.unplaceable));
  console.log(row('a full pass (for scale)', passes));
  const ratio = pct(lat.unplaceable, 50) / pct(lat.parked, 50);
  console.log(`unplaceable / parked p50: ${ratio.toFixed(2)}× (target ≤ 2×: ${ratio <= 2 ? 'met' : 'MISSED'})`);
  console.log(`a pass ran during the measured refusals: ${reconciler.snapshot().lastPass?.startedAt === lastPassBefore ? 'no' : 'YES'} (a refusal asks for none)`);

  await router.close();
  await reconciler.stop();
  rmSync(root, { recursive: true, force: true });
}

await main();
