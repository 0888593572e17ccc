/**
 * The Vulkan engine artifact for device tests: the cached llama-server build (llamaServerDir) plus
 * `libggml-vulkan.so` from the npm package built from the same llama.cpp release
 * (`@node-llama-cpp/linux-x64-vulkan`, fetched with `npm pack`, no install scripts), as a tar.gz
 * with its sha256, the way llama.cpp's release archives ship backends beside the binary. The build
 * loads ggml backends dynamically (GGML_BACKEND_DL: libggml-cpu.so is its own library), so the
 * Vulkan backend is picked up from the executable's directory.
 *
 * It runs on Mesa's software Vulkan device (lavapipe, Debian `mesa-vulkan-drivers`), which ggml
 * lists only with GGML_VK_VISIBLE_DEVICES=0 (it skips CPU-type devices unless named).
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { llamaServerCacheDir, llamaServerDir, NODE_LLAMA_CPP_VERSION } from './llama-server.js';

export interface EngineArtifact {
  /** The tar.gz. */
  readonly path: string;
  readonly sha256: string;
  readonly bytes: number;
  /** The unpacked engine dir (llama-server + libraries), for running it by hand. */
  readonly dir: string;
}

/** The lavapipe ICD file Debian's mesa-vulkan-drivers installs. */
const LAVAPIPE_ICD = '/usr/share/vulkan/icd.d/lvp_icd.x86_64.json';

/** Why the Vulkan tests cannot run here, or null when they can. */
export function vulkanUnavailable(): string | null {
  if (!existsSync(LAVAPIPE_ICD)) return `no lavapipe Vulkan driver (${LAVAPIPE_ICD}; apt-get install mesa-vulkan-drivers)`;
  const loader = spawnSync('sh', ['-c', 'ldconfig -p | grep -q "libvulkan.so.1"']);
  if (loader.status !== 0) return 'no Vulkan loader (libvulkan.so.1; apt-get install libvulkan1)';
  return null;
}

/** `npm pack` a backend package once into the cache; returns the path of its backend library. */
function backendLibrary(pkg: string, lib: string): string {
  const dir = join(llamaServerCacheDir(), '..', 'backends', `${pkg.replace(/[@/]/g, '_')}-${NODE_LLAMA_CPP_VERSION}`);
  const out = join(dir, lib);
  if (existsSync(out)) return out;
  const tmp = `${dir}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const pack = spawnSync('npm', ['pack', `${pkg}@${NODE_LLAMA_CPP_VERSION}`, '--silent', '--ignore-scripts'], { cwd: tmp, encoding: 'utf8', timeout: 300_000 });
  if (pack.status !== 0) throw new Error(`npm pack ${pkg}: ${pack.stderr}`);
  const tgz = pack.stdout.trim().split('\n').pop()!;
  const list = spawnSync('tar', ['-tzf', join(tmp, tgz)], { encoding: 'utf8', maxBuffer: 1 << 24 });
  const member = list.stdout.split('\n').find((l) => l.endsWith(`/${lib}`));
  if (!member) throw new Error(`${pkg}: no ${lib} in the package`);
  const x = spawnSync('tar', ['-xzf', join(tmp, tgz), '-C', tmp, member], { encoding: 'utf8' });
  if (x.status !== 0) throw new Error(`tar: ${x.stderr}`);
  copyFileSync(join(tmp, member), join(tmp, lib));
  rmSync(join(tmp, tgz));
  rmSync(join(tmp, 'package'), { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  return out;
}

/** The Vulkan engine artifact under `workDir` (made once per workDir). */
export async function vulkanEngineArtifact(workDir: string): Promise<EngineArtifact> {
  return backendArtifact(workDir, '@node-llama-cpp/linux-x64-vulkan', 'libggml-vulkan.so', 'vulkan');
}

export async function cudaEngineArtifact(workDir: string): Promise<EngineArtifact> {
  return backendArtifact(workDir, '@node-llama-cpp/linux-x64-cuda', 'libggml-cuda.so', 'cuda');
}

async function backendArtifact(workDir: string, pkg: string, lib: string, tag: string): Promise<EngineArtifact> {
  const base = await llamaServerDir();
  const dir = join(workDir, `engine-${tag}`);
  const path = join(workDir, `llama-${tag}.tar.gz`);
  if (!existsSync(path)) {
    rmSync(dir, { recursive: true, force: true });
    cpSync(base, dir, { recursive: true, verbatimSymlinks: true });
    rmSync(join(dir, '.complete'), { force: true });
    copyFileSync(backendLibrary(pkg, lib), join(dir, lib));
    const tar = spawnSync('tar', ['-czf', path, '-C', dir, '.'], { encoding: 'utf8' });
    if (tar.status !== 0) throw new Error(`tar: ${tar.stderr}`);
  }
  const data = readFileSync(path);
  return { path, sha256: createHash('sha256').update(data).digest('hex'), bytes: data.length, dir };
}
