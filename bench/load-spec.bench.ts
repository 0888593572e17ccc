/**
 * Loading and validating a 1,000-model fleet repo, from a directory and from git objects.
 * Target: well under a second in all. Prints time per model; not a test (shared, noisy machines).
 *
 *   npm run build && node dist/bench/load-spec.bench.js [models]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { FleetRepo } from '../src/git/repo.js';
import { dirFiles } from '../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../src/fleet-spec/load.js';
import { minimalFleet, writeFleet, type FleetFilesMap } from '../test/harness/fleet.js';

const count = Number(process.argv[2] ?? 1000);
const files: FleetFilesMap = minimalFleet();
for (let i = 0; i < count; i++) {
  const sha = `f${i.toString(16).padStart(63, 'a')}`;
  files[`models/m-${i}.yaml`] = [
    `# model ${i}`,
    `source: hf://org/m-${i}-GGUF/m-${i}-q4_k_m.gguf`,
    `sha256: ${sha}`,
    `profile: ${i % 2 ? 'chat' : 'embed'}`,
    i % 3 ? 'replicas: 1' : 'on_demand: { idle_timeout: 15m }',
    `aliases: [alias-${i}]`,
    'memory: 1GiB',
    '',
  ].join('\n');
}
const total = Object.keys(files).filter((f) => f.startsWith('models/')).length;
const dir = mkdtempSync(join(tmpdir(), 'llmgw-bench-'));
writeFleet(dir, files);
const git = (...args: string[]): string => execFileSync('git', args, { cwd: dir, encoding: 'utf8' }).trim();
git('init', '-q', '-b', 'main');
git('-c', 'user.name=bench', '-c', 'user.email=bench@example.test', 'add', '-A');
git('-c', 'user.name=bench', '-c', 'user.email=bench@example.test', 'commit', '-qm', 'bench fleet');
const oid = git('rev-parse', 'HEAD');

async function time(label: string, run: () => Promise<boolean>): Promise<void> {
  await run(); // warm-up: schema compilation, caches
  const runs = 5;
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const ok = await run();
    times.push(performance.now() - t0);
    if (!ok) throw new Error(`${label}: the generated fleet did not validate`);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(runs / 2)]!;
  console.log(`${label.padEnd(28)} ${total} models: median ${median.toFixed(1)} ms per load, ${((median / total) * 1000).toFixed(1)} µs per model (${runs} runs; target: well under 1000 ms)`);
}

/** `llmgw validate DIR` as an operator runs it (a fresh node, Node start-up and imports included), against a bare `node -e ''` in the same run. */
function wall(label: string, args: readonly string[]): number {
  const runs = 5;
  const times: number[] = [];
  for (let i = 0; i <= runs; i++) {
    const t0 = performance.now();
    execFileSync(process.execPath, args, { stdio: 'ignore' });
    if (i > 0) times.push(performance.now() - t0); // the first run warms the file cache
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(runs / 2)]!;
  console.log(`${label.padEnd(28)} median ${median.toFixed(0)} ms wall (${runs} runs)`);
  return median;
}

try {
  const bare = wall('node -e "" (baseline)', ['-e', '']);
  const cli = wall(`llmgw validate (${total} models)`, [join(import.meta.dirname, '..', '..', 'bin', 'llmgw.js'), 'validate', dir]);
  console.log(`llmgw validate: ${(cli / bare).toFixed(1)} × a bare node start (target: ≤ 500 ms wall)`);
  await time('load + validate (dir)', async () => (await loadFleetSpec(dirFiles(dir), null)).ok);
  const repo = new FleetRepo({ path: dir });
  await time('load + validate (git objects)', async () => (await loadFleetSpec(repo.files(oid), oid)).ok);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
