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
    if (v === undefined) throw new Error(`device backend ${backend} has no known visibility variable`);
    const base = nodeEnv[v]?.split(',').map((s) => s.trim()).filter((s) => s !== '');
    env[v] = indices.map((i) => (base && base.length > 0 ? (base[i] ?? String(i)) : String(i))).join(',');
    indices.forEach((_, k) => deviceArgs.push(`${backend}${k}`));
  }
  return { env, deviceArgs };
}
