/**
 * The fleet files of the scaling tests (#42) on the controller harness's sshd nodes: the harness's
 * models removed, short stop and drain graces, a `scale:` default, a one-slot single-thread
 * profile, and one on-demand model of 300 MiB that scales to `maxReplicas`.
 */
import type { TinyModelFile } from '../fixtures/gguf.js';
import { modelYaml, type TestFleet } from './controller.js';

export interface ScaleFleetOptions {
  readonly model: string;
  readonly gguf: TinyModelFile;
  /** fleet.yaml's `scale:` value, e.g. "{ target: 80%, up_after: 2s, down_after: 5m }". */
  readonly scale: string;
  readonly stopGrace?: string;
  readonly drainGrace?: string;
  readonly ctxSize?: number;
  readonly maxReplicas?: number;
}

export function scaleFleetFiles(fleet: TestFleet, o: ScaleFleetOptions): Record<string, string> {
  const f = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', `stop_grace: ${o.stopGrace ?? '1s'}`, `drain_grace: ${o.drainGrace ?? '30s'}`, `scale: ${o.scale}`, 'queue: { max: 64, timeout: 5m }', ''].join('\n');
  f['profiles/one-slot.yaml'] = ['engine: llama-cpp@test', `ctx_size: ${o.ctxSize ?? 2048}`, 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n');
  f[`models/${o.model}.yaml`] = modelYaml(o.gguf, [`on_demand: { idle_timeout: 10m, max_replicas: ${o.maxReplicas ?? 3} }`, 'memory: 300MiB']).replace('profile: tiny', 'profile: one-slot');
  return f;
}
