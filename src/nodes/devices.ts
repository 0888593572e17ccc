/**
 * Devices (GPUs) as an installed engine sees them: `llama-server --list-devices`, parsed; and the
 * per-replica visibility llmgw sets from the devices placement chose (pure).
 *
 * llama-server prints (ggml backends loaded beside the binary):
 *   Available devices:
 *     Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)
 *     CUDA0: NVIDIA GeForce RTX 4090 (24076 MiB, 23750 MiB free)
 *
 * Visibility: a replica placed on VulkanN runs with GGML_VK_VISIBLE_DEVICES set to that device's
 * index (CUDA: CUDA_VISIBLE_DEVICES), so inside the replica it is device 0 (`--device Vulkan0`).
 * Where the node's env already restricts the variable (lavapipe needs GGML_VK_VISIBLE_DEVICES=0 to
 * be listed at all), VulkanN is the N-th entry of that list. A replica that uses no device gets the
 * variables empty: no device is visible to it, so llama-server's own `-ngl auto` cannot take device
 * memory llmgw does not account for.
 */
import { LlmgwError } from '../errors/catalogue.js';

export interface DeviceObservation {
  /** ggml's device name, e.g. Vulkan0, CUDA1. */
  readonly name: string;
  /** e.g. "llvmpipe (LLVM 15.0.6, 256 bits)". */
  readonly description: string;
  readonly totalBytes: number;
  readonly freeBytes: number;
}

const MIB = 2 ** 20;
const LINE_RE = /^\s*([A-Za-z][A-Za-z_-]*\d+):\s+(.*?)\s+\((\d+) MiB, (\d+) MiB free\)\s*$/;

/** The devices in `llama-server --list-devices` output (other lines are ignored). */
export function parseListDevices(text: string): DeviceObservation[] {
  const out: DeviceObservation[] = [];
  for (const line of text.split('\n')) {
    const m = LINE_RE.exec(line);
    if (!m) continue;
    out.push({ name: m[1]!, description: m[2]!, totalBytes: Number(m[3]) * MIB, freeBytes: Number(m[4]) * MIB });
  }
  return out;
}

/** The backend of a device name: Vulkan0 → Vulkan, CUDA1 → CUDA. */
export function deviceBackend(name: string): string {
  return name.replace(/\d+$/, '');
}

export function deviceIndex(name: string): number {
  return Number(/(\d+)$/.exec(name)?.[1] ?? NaN);
}

/** The visibility variable of each backend llmgw sets. */
export const VISIBILITY_VARS: Readonly<Record<string, string>> = Object.freeze({
  Vulkan: 'GGML_VK_VISIBLE_DEVICES',
  CUDA: 'CUDA_VISIBLE_DEVICES',
});

/** Whether llmgw can pin a replica to this device (its backend has a visibility variable). */
export function pinnable(name: string): boolean {
  return VISIBILITY_VARS[deviceBackend(name)] !== undefined;
}

/** Devices of one node, as several engines list them: each name once (the first engine's entry). */
export function mergeDevices(lists: readonly (readonly DeviceObservation[])[]): DeviceObservation[] {
  const seen = new Map<string, DeviceObservation>();
  for (const l of lists) for (const d of l) if (!seen.has(d.name)) seen.set(d.name, d);
  return [...seen.values()].sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
}

export interface ReplicaDeviceSetup {
  /** Environment of the replica: the visibility variables (empty = none visible). */
  readonly env: Readonly<Record<string, string>>;
  /** The devices as the replica sees them (for --device), e.g. ["Vulkan0"]. */
  readonly deviceArgs: readonly string[];
}

/**
 * Visibility and --device names for a replica on `devices` (node-level names, one backend), given
 * the node's own env. No devices: every visibility variable empty.
 */
export function replicaDeviceSetup(devices: readonly string[], nodeEnv: Readonly<Record<string, string>>): ReplicaDeviceSetup {
  const env: Record<string, string> = {};
  for (const v of Object.values(VISIBILITY_VARS)) env[v] = '';
  const deviceArgs: string[] = [];
  const byBackend = new Map<string, number[]>();
  for (const d of devices) {
    const b = deviceBackend(d);
    byBackend.set(b, [...(byBackend.get(b) ?? []), deviceIndex(d)]);
  }
  for (const [backend, indices] of byBackend) {
    const v = VISIBILITY_VARS[backend];
    if (v === undefined) throw new LlmgwError('INTERNAL', `device backend ${backend} has no known visibility variable`, { backend });
    const base = nodeEnv[v]?.split(',').map((s) => s.trim()).filter((s) => s !== '');
    env[v] = indices.map((i) => (base && base.length > 0 ? (base[i] ?? String(i)) : String(i))).join(',');
    indices.forEach((_, k) => deviceArgs.push(`${backend}${k}`));
  }
  return { env, deviceArgs };
}

/**
 * One GPU as `nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free
 * --format=csv,noheader,nounits` reports it (MiB figures; "[N/A]" or "[Not Supported]" → null).
 */
export interface NvidiaGpu {
  /** nvidia-smi's index (PCI bus order). */
  readonly index: number;
  readonly name: string;
  readonly totalBytes: number | null;
  readonly usedBytes: number | null;
  readonly freeBytes: number | null;
}

/** The nvidia-smi query columns the node observation asks for, in order. */
export const NVIDIA_SMI_QUERY = 'index,name,memory.total,memory.used,memory.free';

const MIB_FIELD_RE = /^\d+$/;

/**
 * The GPUs in `nvidia-smi --query-gpu=${NVIDIA_SMI_QUERY} --format=csv,noheader,nounits` output.
 * A line that is not `index, name, total, used, free` (nvidia-smi's "has failed because it couldn't
 * communicate with the NVIDIA driver" message, anything else) is ignored; a memory field that is not
 * a whole number of MiB is null. The name is every field between the index and the last three, so a
 * comma in a name does not shift the figures.
 */
export function parseNvidiaSmiQuery(text: string): NvidiaGpu[] {
  const out: NvidiaGpu[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(',').map((s) => s.trim());
    if (f.length < 5 || !/^\d+$/.test(f[0]!)) continue;
    const mem = f.slice(-3);
    const name = f.slice(1, -3).join(', ');
    // a line with no figure at all and no name is not a GPU line
    if (name === '' || !mem.every((m) => MIB_FIELD_RE.test(m) || /^\[[^\]]*\]$/.test(m))) continue;
    const bytes = (m: string): number | null => (MIB_FIELD_RE.test(m) ? Number(m) * MIB : null);
    out.push({ index: Number(f[0]), name, totalBytes: bytes(mem[0]!), usedBytes: bytes(mem[1]!), freeBytes: bytes(mem[2]!) });
  }
  return out;
}

/**
 * The devices with each CUDA device's free memory taken from nvidia-smi (live: read at each
 * observation without loading a backend), matched by index: CUDA<i> is nvidia-smi's GPU i, or the
 * i-th entry of the node env's CUDA_VISIBLE_DEVICES when that restricts what llama-server sees. A
 * device is only updated when the GPU's name is the one llama-server reported (its description), so
 * a differing enumeration order (CUDA's default is fastest first, nvidia-smi's is PCI bus order)
 * never lends one GPU's figure to another (nor does ggml's split of one GPU into virtual devices,
 * whose descriptions carry a "(dev pX/vY)" suffix); free is capped at the device's total. Devices of other
 * backends, CUDA devices with no matching GPU, and GPUs whose free memory is unknown ("[N/A]") keep
 * what llama-server reported.
 */
export function withLiveCudaMemory(
  devices: readonly DeviceObservation[],
  gpus: readonly NvidiaGpu[],
  nodeEnv: Readonly<Record<string, string>> = {},
): DeviceObservation[] {
  const visible = nodeEnv['CUDA_VISIBLE_DEVICES']?.split(',').map((s) => s.trim()).filter((s) => s !== '');
  return devices.map((d) => {
    if (deviceBackend(d.name) !== 'CUDA') return d;
    const i = deviceIndex(d.name);
    const entry = visible && visible.length > 0 ? visible[i] : String(i);
    if (entry === undefined || !/^\d+$/.test(entry)) return d;
    const gpu = gpus.find((g) => g.index === Number(entry));
    if (gpu === undefined || gpu.freeBytes === null || gpu.name !== d.description.trim()) return d;
    return { ...d, freeBytes: Math.min(gpu.freeBytes, d.totalBytes) };
  });
}
