/**
 * The bundled local fleet behind `npm start` (`llmgw serve --local`): one `local` node (this
 * machine), the llama-server build from scripts/build-llama-server.sh, a tiny demo model, a model
 * with an unknown architecture (it gets parked) and one too big for any machine (unplaceable).
 * The fleet is a real git repo under .llmgw/local/fleet: edit it and commit to change the fleet.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { dirname, join } from 'node:path';
import git from 'isomorphic-git';
import { writeTinyModel } from '../gguf/tiny-model.js';
import { parseListDevices } from '../nodes/devices.js';
import { packageRoot } from '../util/package-root.js';

export interface LocalFleet {
  readonly home: string;
  readonly fleetDir: string;
  readonly stateDir: string;
  readonly created: boolean;
}

/** Runs the build script (cached after the first run), streaming its progress; returns the engine dir. */
export function ensureEngine(progress: (line: string) => void): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [join(packageRoot, 'scripts', 'build-llama-server.sh')], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => d.toString().split('\n').filter(Boolean).forEach(progress));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out.trim().split('\n').pop()!) : reject(new Error(`building llama-server failed (exit ${code}); see the lines above`))));
  });
}

/**
 * A device the demo can offload to: what the engine lists (`--list-devices`), also with
 * GGML_VK_VISIBLE_DEVICES=0 (a CPU-type Vulkan device such as Mesa's lavapipe is listed only then).
 * Returns the env the node needs, or why there is none.
 */
export function demoDevice(engineBinary: string): { device: string; env: Record<string, string> } | { none: string } {
  const backends = fs.existsSync(dirname(engineBinary)) ? fs.readdirSync(dirname(engineBinary)).filter((f) => /^libggml-(vulkan|cuda|hip|metal|sycl)\.so$/.test(f)) : [];
  if (backends.length === 0) return { none: `the engine (${dirname(engineBinary)}) has no GPU backend library beside llama-server (e.g. libggml-vulkan.so from @node-llama-cpp/linux-x64-vulkan)` };
  for (const env of [{}, { GGML_VK_VISIBLE_DEVICES: '0' }] as Record<string, string>[]) {
    const r = spawnSync(engineBinary, ['--list-devices'], { encoding: 'utf8', timeout: 15_000, env: { ...process.env, ...env } });
    const d = parseListDevices(`${r.stdout ?? ''}\n${r.stderr ?? ''}`)[0];
    if (d) return { device: `${d.name}: ${d.description}`, env };
  }
  return { none: `the engine's ${backends.join(', ')} lists no device on this machine` };
}

export function localFleetFiles(p: { engineBinary: string; modelsDir: string; nodeDir: string; demoSha: string; kevSha: string; gpu?: { device: string; env: Record<string, string> } }): Record<string, string> {
  const env = p.gpu && Object.keys(p.gpu.env).length > 0 ? [`env: { ${Object.entries(p.gpu.env).map(([k, v]) => `${k}: "${v}"`).join(', ')} }`] : [];
  const gpu: Record<string, string> = p.gpu
    ? {
        'profiles/gpu.yaml': ['# Every layer on the GPU llmgw picks (placement checks its device memory).', 'engine: llama-cpp@local', 'ctx_size: 1024', 'threads: 2', 'parallel: 2', 'memory_overhead: 256MiB', 'start_timeout: 120s', 'gpu_layers: all', ''].join('\n'),
        'models/demo-gpu.yaml': [`# The tiny demo model offloaded to ${p.gpu.device}.`, `source: file://${p.modelsDir}/demo.gguf`, `sha256: ${p.demoSha}`, 'profile: gpu', 'replicas: 1', ''].join('\n'),
      }
    : {};
  return {
    ...gpu,
    'fleet.yaml': [
      '# The local demo fleet: one machine, tiny models. Edit, `git commit`, and llmgw applies it.',
      'poll_interval: 5s',
      'park_after_failures: 5',
      'backoff: { initial: 2s, max: 10s }',
      'activation_window: 60s',
      'placement_reserve: 512MiB',
      'stop_grace: 5s',
      '',
    ].join('\n'),
    'nodes/local.yaml': ['# This machine, without SSH.', 'transport: local', `data_dir: ${p.nodeDir}`, 'ports: { from: 28000, to: 28099 }', ...env, ''].join('\n'),
    'engines/llama-cpp.yaml': ['# llama-server built by scripts/build-llama-server.sh', 'versions:', '  local:', `    path: ${p.engineBinary}`, ''].join('\n'),
    'profiles/small.yaml': ['engine: llama-cpp@local', 'ctx_size: 1024', 'threads: 2', 'parallel: 2', 'memory_overhead: 256MiB', 'start_timeout: 120s', ''].join('\n'),
    'models/demo.yaml': [
      '# A tiny generated model (random weights): it answers with nonsense, fast.',
      '# Point source at a real GGUF (file:///path/to/model.gguf and its sha256) to chat for real.',
      `source: file://${p.modelsDir}/demo.gguf`,
      `sha256: ${p.demoSha}`,
      'profile: small',
      'replicas: 1',
      'aliases: [gpt-4o-mini]',
      '',
    ].join('\n'),
    'models/kev-demo.yaml': [
      "# A GGUF whose architecture ('kev') llama.cpp does not know: it fails to start and is parked",
      '# after 5 tries. `llmgw ctl retry kev-demo` tries again.',
      `source: file://${p.modelsDir}/kev-demo.gguf`,
      `sha256: ${p.kevSha}`,
      'profile: small',
      'replicas: 1',
      '',
    ].join('\n'),
    'models/huge-demo.yaml': [
      '# Needs more memory than any machine has: llmgw reports it unplaceable, with the numbers.',
      `source: file://${p.modelsDir}/demo.gguf`,
      `sha256: ${p.demoSha}`,
      'profile: small',
      'replicas: 1',
      'memory: 4TiB',
      '',
    ].join('\n'),
  };
}

/** Creates the local fleet repo on first start; later starts keep what the user committed. */
export async function prepareLocalFleet(home: string, progress: (line: string) => void): Promise<LocalFleet> {
  const fleetDir = join(home, 'fleet');
  const stateDir = join(home, 'state');
  const modelsDir = join(home, 'models');
  const nodeDir = join(home, 'node');
  progress('[llmgw] preparing the local fleet in ' + home);
  const engineDir = process.env.LLMGW_ENGINE_DIR ?? (await ensureEngine(progress));
  fs.mkdirSync(modelsDir, { recursive: true });
  fs.mkdirSync(nodeDir, { recursive: true });
  const demo = await writeTinyModel(join(modelsDir, 'demo.gguf'), { seed: 1 });
  const kev = await writeTinyModel(join(modelsDir, 'kev-demo.gguf'), { seed: 2, architecture: 'kev' });
  if (fs.existsSync(join(fleetDir, '.git'))) return { home, fleetDir, stateDir, created: false };

  const engineBinary = join(engineDir, 'llama-server');
  const gpu = demoDevice(engineBinary);
  if ('none' in gpu) progress(`[llmgw] no GPU model in the demo: ${gpu.none}`);
  else progress(`[llmgw] the demo includes demo-gpu, offloaded to ${gpu.device}`);
  const files = localFleetFiles({ engineBinary, modelsDir, nodeDir, demoSha: demo.sha256, kevSha: kev.sha256, ...('none' in gpu ? {} : { gpu }) });
  fs.mkdirSync(fleetDir, { recursive: true });
  await git.init({ fs, dir: fleetDir, defaultBranch: 'main' });
  for (const [path, content] of Object.entries(files)) {
    fs.mkdirSync(dirname(join(fleetDir, path)), { recursive: true });
    fs.writeFileSync(join(fleetDir, path), content);
    await git.add({ fs, dir: fleetDir, filepath: path });
  }
  await git.commit({ fs, dir: fleetDir, message: 'The local demo fleet', author: { name: 'llmgw', email: 'llmgw@localhost' } });
  progress(`[llmgw] created the local fleet repo ${fleetDir} (edit and commit to change it)`);
  return { home, fleetDir, stateDir, created: true };
}
