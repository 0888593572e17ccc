/**
 * GPU engine artifacts for device tests: the cached llama-server build (llamaServerDir) plus a ggml
 * backend library from the npm package built from the same llama.cpp release (fetched with
 * `npm pack`, no install scripts), as a tar.gz with its sha256, the way llama.cpp's release archives
 * ship backends beside the binary. The build loads ggml backends dynamically (GGML_BACKEND_DL:
 * libggml-cpu.so is its own library), so the backend is picked up from the executable's directory.
 *
 * Backends: Vulkan (`@node-llama-cpp/linux-x64-vulkan`'s libggml-vulkan.so) runs here on Mesa's
 * software Vulkan device (lavapipe, Debian `mesa-vulkan-drivers`), which ggml lists only with
 * GGML_VK_VISIBLE_DEVICES=0 (it skips CPU-type devices unless named); CUDA
 * (`@node-llama-cpp/linux-x64-cuda`'s libggml-cuda.so) where a CUDA device exists. Only the library,
 * the device name and the env differ between them.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { llamaServerCacheDir, llamaServerDir, NODE_LLAMA_CPP_VERSION } from './llama-server.js';
import { parseListDevices, type DeviceObservation } from '../../src/nodes/devices.js';

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

/** A ggml GPU backend the device tests run with: where its library comes from and how a node sees its device. */
export interface GpuBackend {
  /** "vulkan" | "cuda": the artifact's tag. */
  readonly name: string;
  /** For test names: "lavapipe (Vulkan0)". */
  readonly label: string;
  /** The npm package of node-llama-cpp's prebuilt backend (the same llama.cpp release as the cached build). */
  readonly pkg: string;
  /** The backend library in it, placed beside llama-server. */
  readonly lib: string;
  /** The device the tests use, as llama-server names it. */
  readonly device: string;
  /** The nodes' env (and the engine's, run by hand) for the device to be listed. */
  readonly env: Readonly<Record<string, string>>;
  /** Why the backend cannot run on this machine, or null when it can. */
  unavailable(): string | null;
}

/** Why no CUDA device is usable here (nvidia-smi -L lists no GPU), or null. */
export function cudaUnavailable(): string | null {
  const r = spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8', timeout: 15_000 });
  if (r.status === 0 && /^GPU \d+:/m.test(r.stdout ?? '')) return null;
  return 'not run: no CUDA device on this machine (nvidia-smi -L lists none)';
}

/** llama.cpp's Vulkan backend on Mesa's lavapipe: listed only with GGML_VK_VISIBLE_DEVICES=0. */
export const VULKAN: GpuBackend = Object.freeze({
  name: 'vulkan', label: 'lavapipe (Vulkan0)', pkg: '@node-llama-cpp/linux-x64-vulkan', lib: 'libggml-vulkan.so', device: 'Vulkan0',
  env: Object.freeze({ GGML_VK_VISIBLE_DEVICES: '0' }), unavailable: vulkanUnavailable,
});

/**
 * llama.cpp's CUDA backend (the package's libggml-cuda.so; the CUDA 12 runtime libraries it links,
 * libcudart/libcublas, come from the machine's CUDA install): CUDA0 is listed with no env.
 */
export const CUDA: GpuBackend = Object.freeze({
  name: 'cuda', label: 'CUDA (CUDA0)', pkg: '@node-llama-cpp/linux-x64-cuda', lib: 'libggml-cuda.so', device: 'CUDA0',
  env: Object.freeze({}), unavailable: cudaUnavailable,
});

export const GPU_BACKENDS: readonly GpuBackend[] = [VULKAN, CUDA];

/** The Vulkan engine artifact under `workDir` (made once per workDir). */
export async function vulkanEngineArtifact(workDir: string): Promise<EngineArtifact> {
  return gpuEngineArtifact(workDir, VULKAN);
}

/**
 * The engine artifact of a backend under `workDir` (made once per workDir): the cached llama-server
 * with the backend's library beside it.
 */
export async function gpuEngineArtifact(workDir: string, backend: GpuBackend): Promise<EngineArtifact> {
  const { pkg, lib, name: tag } = backend;
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

/**
 * The backend's device as the artifact's llama-server lists it here (`--list-devices` with the
 * backend's env). Not listed: an error naming the backend library's unresolved dependencies, if any
 * (the CUDA runtime missing), and the listing itself.
 */
export function listedDevice(art: EngineArtifact, backend: GpuBackend): DeviceObservation {
  const r = spawnSync(join(art.dir, 'llama-server'), ['--list-devices'], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, ...backend.env } });
  const d = parseListDevices(`${r.stdout ?? ''}\n${r.stderr ?? ''}`).find((x) => x.name === backend.device);
  if (d) return d;
  const ldd = spawnSync('ldd', [join(art.dir, backend.lib)], { encoding: 'utf8' });
  const missing = (ldd.stdout ?? '').split('\n').filter((l) => /not found/.test(l)).map((l) => l.trim());
  throw new Error(`${backend.device} is not listed by ${backend.pkg}'s ${backend.lib} here${missing.length > 0 ? `; unresolved libraries: ${missing.join(', ')}` : ''}\n${(r.stdout ?? '').slice(-2000)}${(r.stderr ?? '').slice(-2000)}`);
}

/**
 * What llama-server allocated on a device by its own load log (-lv 4): the sum of its "<device> model /
 * KV / compute / RS buffer size = N MiB" lines, those lines, and its "offloaded K/M layers to GPU" count.
 */
export function reportedDeviceBytes(log: string, device: string): { total: number; lines: string[]; offloaded: string | null } {
  const lines = log.split('\n').filter((l) => new RegExp(`\\b${device} (model|KV|compute|RS) buffer size`).test(l));
  let total = 0;
  for (const l of lines) total += Number(/= *([\d.]+) MiB/.exec(l)?.[1] ?? 0) * 2 ** 20;
  return { total, lines, offloaded: /offloaded (\d+\/\d+) layers to GPU/.exec(log)?.[1] ?? null };
}
