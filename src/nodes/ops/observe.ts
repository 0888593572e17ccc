/**
 * Observe a node: everything `observe()` needs in one round trip (memory, CPUs, disk, engines and the
 * devices they see, NVIDIA GPUs' live memory, model files, replicas), and the parsing of it.
 */
import { LlmgwError } from '../../errors/catalogue.js';
import type { EngineObservation, Fence, ModelFileObservation, NodeFenceView, NodeObservation, RpcWorkerObservation } from '../driver.js';
import { mergeDevices, NVIDIA_SMI_QUERY, parseListDevices, parseNvidiaSmiQuery, withLiveCudaMemory, type NvidiaGpu } from '../devices.js';
import { parseFenceSection } from '../fence.js';
import { shq } from '../shell.js';
import { envExports, fenceDefs, int, PRELUDE } from './prelude.js';
import type { ReplicaState } from './replica-inspect.js';
import { RPC_SERVER_NAMES, rpcWorkerObservation, rpcWorkerObserveLoop } from './rpc-worker.js';
import { parseState } from './replica-inspect.js';
import { parseSections, tailOf } from './sections.js';

/** Engine staging and build dirs older than this (minutes) are leftovers of cut-off installs. */
export const STALE_INSTALL_MINUTES = 24 * 60;

/** Every section the observe script prints, each read by parseObservation. */
export const OBSERVE_SECTIONS = ['fence', 'mem', 'cpus', 'flags', 'arch', 'df', 'gpus', 'engine', 'devices', 'model', 'replica', 'state', 'offload', 'alive', 'dead', 'rpc', 'rpc-state', 'rpc-alive', 'rpc-dead', 'end'] as const;
export type ObserveSection = (typeof OBSERVE_SECTIONS)[number];

/**
 * Everything `observe()` needs in one round trip. With a fence, the look renews the owner record
 * when it is this fence's (the heartbeat), claims it when there is none or it expired, and leaves
 * another owner's or a newer epoch's record as it is; the `fence` section reports it.
 */
export function observeScript(dataDir: string, nonce: string, logLines: number, fence?: Fence | null, env: Readonly<Record<string, string>> = {}): string {
  const m = `@@${nonce}`;
  const look = fence
    ? `llmgw_fence_lock; llmgw_fence_check look; llmgw_fence_unlock
echo ${shq(`${m} fence`)}; printf '%s\\n' "$fence_line"
[ -n "$fence_took" ] && printf 'took %s\\n' "$fence_took"
`
    : '';
  return `${PRELUDE}
${fenceDefs(dataDir, fence)}d=${shq(dataDir)}
mkdir -p "$d/engines" "$d/models" "$d/replicas" || exit 1
${look}echo ${shq(`${m} mem`)}; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo
echo ${shq(`${m} cpus`)}; nproc 2>/dev/null || getconf _NPROCESSORS_ONLN
echo ${shq(`${m} flags`)}; grep -m1 -E '^(flags|Features)[[:space:]]*:' /proc/cpuinfo | sed 's/^[^:]*:[[:space:]]*//'
echo ${shq(`${m} arch`)}; uname -m
echo ${shq(`${m} df`)}; df -Pk "$d" | tail -n 1
# engine installs that were cut off (the controller or the node went down mid-install) leave their
# staging and build dirs behind; no install runs for a day, so those older than that are removed
find "$d/engines" -mindepth 2 -maxdepth 2 -type d \\( -name '.*.tmp-*' -o -name '.*.build-*' \\) -mmin +${STALE_INSTALL_MINUTES} -exec rm -rf {} + 2>/dev/null
# NVIDIA GPUs' memory, live, where the node has nvidia-smi: bounded in time like --list-devices below;
# no nvidia-smi: no section; its errors (no driver, a hung GPU) leave lines the parser ignores
if command -v nvidia-smi >/dev/null 2>&1; then
  echo ${shq(`${m} gpus`)}
  if command -v timeout >/dev/null 2>&1; then timeout -k 2 15 nvidia-smi ${shq(`--query-gpu=${NVIDIA_SMI_QUERY}`)} --format=csv,noheader,nounits; else nvidia-smi ${shq(`--query-gpu=${NVIDIA_SMI_QUERY}`)} --format=csv,noheader,nounits; fi </dev/null 2>/dev/null | head -n 64
fi
for f in "$d"/engines/*/*/.complete; do
  [ -f "$f" ] || continue
  v=\${f%/.complete}; e=\${v%/*}
  echo ${shq(`${m} engine`)}; printf '%s\\n' "\${e##*/}" "\${v##*/}"; head -n 1 "$f"
  # whether an rpc-server sits beside its llama-server (the engine can run RPC workers)
  x=$(head -n 1 "$f"); x=\${x%/*}; o=no-rpc
  for n in ${RPC_SERVER_NAMES.map((n) => shq(n)).join(' ')}; do [ -x "$x/$n" ] && o=rpc; done
  printf '%s\\n' "$o"
  # its build as --version named it at the install (#40), empty when not recorded
  bl=; if [ -f "$v/.build" ]; then read -r bl <"$v/.build" || true; fi
  printf '%s\\n' "$bl"
  # the devices this engine sees (its ggml backends, with the node's env), bounded in time: an
  # engine that ignores SIGTERM is killed 2 s after the 15 s bound, so a look never hangs on one
  b=$(head -n 1 "$f")
  if [ -x "$b" ]; then
    echo ${shq(`${m} devices`)}
    ( ${envExports(env)}if command -v timeout >/dev/null 2>&1; then timeout -k 2 15 "$b" --list-devices; else "$b" --list-devices; fi ) </dev/null 2>&1 | grep -E '^[[:space:]]+[A-Za-z][A-Za-z_-]*[0-9]+: ' | head -n 64
  fi
done
for f in "$d"/models/*.gguf; do
  [ -f "$f" ] || continue
  echo ${shq(`${m} model`)}; printf '%s\\n' "$f"; stat -c %s "$f" 2>/dev/null || wc -c <"$f"
done
${replicaLoop(m, logLines)}
${rpcWorkerObserveLoop(m, logLines)}
echo ${shq(`${m} end`)}
`;
}

function replicaLoop(m: string, logLines: number): string {
  return `for r in "$d"/replicas/*/; do
  r=\${r%/}
  [ -f "$r/state.json" ] || continue
  echo ${shq(`${m} replica`)}; printf '%s\\n' "\${r##*/}"
  echo ${shq(`${m} state`)}; cat "$r/state.json"; echo
  # a replica on a device: the layers llama-server says it offloaded (its load log, printed at -lv 4
  # and above), read from the log's first MiB where the load lines are
  if grep -q '"devices"' "$r/state.json" 2>/dev/null; then
    o=$(head -c 1048576 "$r/log" 2>/dev/null | grep -m1 -o 'load_tensors: offloaded [0-9]*/[0-9]* layers to GPU')
    [ -n "$o" ] && { echo ${shq(`${m} offload`)}; printf '%s\n' "$o"; }
  fi
  if llmgw_alive "$r"; then echo ${shq(`${m} alive`)}; else echo ${shq(`${m} dead`)}; tail -n ${int(logLines)} "$r/log" 2>/dev/null; fi
done`;
}

/** One replica dir as the look found it (state null: its state.json is unreadable). */
export interface ObservedReplicaDir {
  readonly id: string;
  readonly state: ReplicaState | null;
  readonly alive: boolean;
  readonly logTail: string;
  /** What llama-server's load log says it offloaded ("offloaded 4/4 layers to GPU"); absent when the log does not say. */
  readonly offloaded?: Offloaded;
}

/** Layers llama-server offloaded to its devices, of the model's offloadable ones (its repeating layers and the output layer). */
export interface Offloaded {
  readonly layers: number;
  readonly of: number;
}

/** The figures of a load log's "offloaded K/M layers to GPU" line; null when it is not one (or K > M). */
export function parseOffloaded(line: string): Offloaded | null {
  const m = /offloaded (\d{1,6})\/(\d{1,6}) layers to GPU/.exec(line);
  if (!m) return null;
  const layers = Number(m[1]);
  const of = Number(m[2]);
  return of > 0 && layers <= of ? { layers, of } : null;
}

/** The observation the script's output holds; the replicas still need their health asked (the driver). */
export type ParsedObservation = Omit<NodeObservation, 'node' | 'at' | 'replicas'> & { readonly replicas: readonly ObservedReplicaDir[] };

/**
 * What observeScript printed, for node `node` whose env is `env` (CUDA devices' free memory comes
 * from nvidia-smi where the node has it, else as the engine listed it). Throws NODE_COMMAND_FAILED
 * when the output was cut short (no `end` section) or the owner record report is unreadable.
 */
export function parseObservation(stdout: string, stderr: string, nonce: string, node: string, env: Readonly<Record<string, string>> = {}): ParsedObservation {
  const sections = parseSections(stdout, nonce);
  if (sections.length === 0 || sections[sections.length - 1]!.name !== 'end') {
    throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: observe: truncated output`, { node, stderr: tailOf(stderr, 20) });
  }
  let totalKb = 0;
  let availKb = 0;
  let cpus = 0;
  let cpuFlags: string[] = [];
  let arch = '';
  let diskFreeBytes = 0;
  const engines: EngineObservation[] = [];
  const models: ModelFileObservation[] = [];
  let gpus: NvidiaGpu[] = [];
  let fenceView: NodeFenceView | null = null;
  type Pending = { id: string; stateText: string; alive: boolean; logTail: string; offloaded: Offloaded | null };
  const pending: Pending[] = [];
  let cur: Pending | null = null;
  const workers: { id: string; stateText: string; alive: boolean; listening: boolean; logTail: string }[] = [];
  for (const s of sections) {
    switch (s.name as ObserveSection) {
      case 'mem':
        for (const l of s.lines) {
          const m = /^(MemTotal|MemAvailable):\s+(\d+)/.exec(l);
          if (m?.[1] === 'MemTotal') totalKb = Number(m[2]);
          else if (m?.[1] === 'MemAvailable') availKb = Number(m[2]);
        }
        break;
      case 'cpus':
        cpus = Number(s.lines[0]?.trim()) || 0;
        break;
      case 'flags':
        cpuFlags = (s.lines[0] ?? '').trim().split(/\s+/).filter((f) => f !== '');
        break;
      case 'arch':
        arch = (s.lines[0] ?? '').trim();
        break;
      case 'df':
        diskFreeBytes = parseDfAvailableKb(s.lines[0] ?? '') * 1024;
        break;
      case 'engine': {
        const [engine, version, binary, rpc, build] = s.lines;
        if (engine && version && binary) engines.push({ engine, version, binary, ...(rpc === 'rpc' || rpc === 'no-rpc' ? { rpc: rpc === 'rpc' } : {}), ...(build ? { build: build.trim() } : {}) });
        break;
      }
      case 'devices': {
        const last = engines[engines.length - 1];
        const devices = parseListDevices(s.lines.join('\n'));
        if (last && devices.length > 0) engines[engines.length - 1] = { ...last, devices };
        break;
      }
      case 'gpus':
        gpus = parseNvidiaSmiQuery(s.lines.join('\n'));
        break;
      case 'model': {
        const [path, size] = s.lines;
        const m = path === undefined ? null : /\/([0-9a-f]{64})\.gguf$/.exec(path);
        if (path && m?.[1]) models.push({ sha256: m[1], path, bytes: Number(size?.trim()) || 0 });
        break;
      }
      case 'fence':
        fenceView = parseFenceSection(s.lines);
        if (fenceView === null) throw new LlmgwError('NODE_COMMAND_FAILED', `node ${node}: observe: unreadable owner record report`, { node, lines: s.lines.slice(0, 3) });
        break;
      case 'replica':
        cur = { id: (s.lines[0] ?? '').trim(), stateText: '', alive: false, logTail: '', offloaded: null };
        pending.push(cur);
        break;
      case 'state':
        if (cur) cur.stateText = s.lines.join('\n');
        break;
      case 'offload':
        if (cur) cur.offloaded = parseOffloaded(s.lines[0] ?? '');
        break;
      case 'alive':
        if (cur) cur.alive = true;
        break;
      case 'dead':
        if (cur) { cur.alive = false; cur.logTail = s.lines.join('\n'); }
        break;
      case 'rpc':
        workers.push({ id: (s.lines[0] ?? '').trim(), stateText: '', alive: false, listening: false, logTail: '' });
        break;
      case 'rpc-state':
        if (workers.length > 0) workers[workers.length - 1]!.stateText = s.lines.join('\n');
        break;
      case 'rpc-alive':
        if (workers.length > 0) Object.assign(workers[workers.length - 1]!, { alive: true, listening: s.lines.some((l) => l.trim() !== '') });
        break;
      case 'rpc-dead':
        if (workers.length > 0) Object.assign(workers[workers.length - 1]!, { alive: false, logTail: s.lines.join('\n') });
        break;
      case 'end':
      default:
        break;
    }
  }
  // CUDA devices' free memory from nvidia-smi where the node has it (live), else as the engine listed it
  if (gpus.length > 0) {
    engines.forEach((e, i) => { if (e.devices) engines[i] = { ...e, devices: withLiveCudaMemory(e.devices, gpus, env) }; });
  }
  return {
    memory: { totalBytes: totalKb * 1024, availableBytes: availKb * 1024 },
    cpus,
    cpuFlags,
    arch,
    diskFreeBytes,
    engines,
    ...(engines.some((e) => e.devices) ? { devices: mergeDevices(engines.map((e) => e.devices ?? [])) } : {}),
    models,
    replicas: pending.map((p) => ({ id: p.id, state: parseState(p.stateText), alive: p.alive, logTail: p.logTail, ...(p.offloaded ? { offloaded: p.offloaded } : {}) })),
    ...(fenceView !== null ? { fence: fenceView } : {}),
    ...(workers.length > 0 ? { rpcWorkers: workers.map((w): RpcWorkerObservation => rpcWorkerObservation(w.id, w.stateText, w.alive, w.listening, w.logTail)) } : {}),
  };
}

/** Available KiB from one `df -Pk` data line (the field before "NN%"). */
export function parseDfAvailableKb(line: string): number {
  const f = line.trim().split(/\s+/);
  const i = f.findIndex((x, k) => k > 0 && /^\d+%$/.test(x));
  return i > 0 ? Number(f[i - 1]) || 0 : 0;
}
