/**
 * Start a replica: the ports query (listening sockets and ports live replicas claim), llama-server's
 * argv, the start script itself, and the parsing of what each printed.
 */
import { LlmgwError } from '../../errors/catalogue.js';
import { cacheRamMiB } from '../../fleet-spec/digest.js';
import type { Fence, ReplicaStartSpec } from '../driver.js';
import { engineKeyFingerprint } from '../driver.js';
import { replicaDeviceSetup } from '../devices.js';
import { parseProcNetTcp } from '../ports.js';
import { shJoin, shq } from '../shell.js';
import { envExports, fenceAct, fenceDefs, int, PRELUDE } from './prelude.js';
import { parseSections } from './sections.js';

/** Exit code of the start script when the chosen port is taken (the driver picks another). */
export const EXIT_PORT_TAKEN = 75;
/** Exit code of the start script when a live replica with the same id exists. */
export const EXIT_REPLICA_EXISTS = 76;
/** The start's preflight (`inputs`) found the engine or the model file gone or changed: nothing was done. */
export const EXIT_INPUT_GONE = 74;

/** Ports that are taken: listening sockets (/proc/net/tcp{,6}) and ports claimed by live replicas and RPC workers. */
export function usedPortsScript(dataDir: string, nonce: string): string {
  const m = `@@${nonce}`;
  return `${PRELUDE}
d=${shq(dataDir)}
echo ${shq(`${m} listen`)}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null
echo ${shq(`${m} claimed`)}
for r in "$d"/replicas/*/ "$d"/rpc/*/; do
  r=\${r%/}
  [ -f "$r/port" ] || continue
  llmgw_alive "$r" && cat "$r/port"
done
echo ${shq(`${m} end`)}
`;
}

/** What usedPortsScript printed: every port taken. */
export function parseUsedPorts(stdout: string, nonce: string): Set<number> {
  const sections = parseSections(stdout, nonce);
  const used = parseProcNetTcp(sections.find((s) => s.name === 'listen')?.lines.join('\n') ?? '');
  for (const l of sections.find((s) => s.name === 'claimed')?.lines ?? []) {
    const p = Number(l.trim());
    if (Number.isInteger(p) && p > 0) used.add(p);
  }
  return used;
}

/**
 * llama-server's argv for a replica (argv[0] = the binary). Profile extra args come last. `slotDir`:
 * the model's slot-file dir on the node (engine-api/slot-files.ts; #38 item 3), created by the start script.
 */
export function replicaArgv(spec: ReplicaStartSpec, bindHost: string, port: number, slotDir?: string): string[] {
  const p = spec.profile;
  const n = (x: number) => {
    if (!Number.isSafeInteger(x)) throw new LlmgwError('SPEC_INVALID_VALUE', `profile ${p.name}: expected an integer, got ${x}`, { profile: p.name });
    return String(x);
  };
  return [
    spec.binary,
    '-m', spec.modelPath,
    '--host', bindHost,
    '--port', n(port),
    '--alias', spec.model,
    '-c', n(p.ctxSize),
    '-np', n(p.parallel),
    ...(p.threads !== null ? ['-t', n(p.threads)] : []),
    ...(p.batchSize !== null ? ['-b', n(p.batchSize)] : []),
    ...(p.embeddings ? ['--embeddings'] : []),
    ...(p.reranking ? ['--reranking'] : []),
    '--cache-ram', n(cacheRamMiB(p.cacheRamBytes)),
    ...(slotDir !== undefined ? ['--slot-save-path', slotDir] : []),
    ...deviceArgv(spec, n),
    ...rpcArgv(spec, n),
    ...p.extraArgs,
  ];
}

/** A group's head (#40): --rpc to its workers, their layers and split, and the log level that prints their buffers. */
function rpcArgv(spec: ReplicaStartSpec, n: (x: number) => string): string[] {
  const rpc = spec.rpc;
  if (!rpc || rpc.endpoints.length === 0) return [];
  return [
    '--rpc', rpc.endpoints.join(','),
    '-ngl', rpc.gpuLayers === 'all' ? 'all' : n(rpc.gpuLayers),
    ...(rpc.split && rpc.split.length > 1 ? ['-ts', rpc.split.map(n).join(',')] : []),
    '-lv', '4',
  ];
}

/**
 * --device/-ngl (and -sm/-ts/-mg) for a replica placed on devices; the devices are named as the
 * replica sees them (its visibility env makes the first chosen device its device 0).
 */
function deviceArgv(spec: ReplicaStartSpec, n: (x: number) => string): string[] {
  const devices = spec.devices ?? [];
  if (devices.length === 0) return [];
  const p = spec.profile;
  const { deviceArgs } = replicaDeviceSetup(devices, {});
  const layers = spec.gpuLayers ?? 'all';
  return [
    '--device', deviceArgs.join(','),
    '-ngl', layers === 'all' ? 'all' : n(layers),
    ...(p.splitMode != null ? ['-sm', p.splitMode] : []),
    ...((p.tensorSplit?.length ?? 0) > 0 ? ['-ts', p.tensorSplit!.join(',')] : []),
    ...(p.mainGpu != null ? ['-mg', n(p.mainGpu)] : []),
  ];
}

/** state.json without its closing brace (the start script appends pid, procStartTime, startedAt and the fence). */
export function replicaStateHead(spec: ReplicaStartSpec, dataDir: string, bindHost: string, port: number, argv: readonly string[]): string {
  return JSON.stringify({
    version: 1, id: spec.id, model: spec.model, digest: spec.digest, port, argv,
    log: `${dataDir}/replicas/${spec.id}/log`, bindHost,
    keyFingerprint: engineKeyFingerprint(spec.apiKey),
    ...((spec.devices?.length ?? 0) > 0 ? { devices: spec.devices, gpuLayers: spec.gpuLayers ?? 'all' } : {}),
  }).replace(/\}$/, '');
}

function inputsCheck(i: NonNullable<StartScriptInput['inputs']>): string {
  return `if ! ${i.engine}; then echo 'llmgw-start-input: the engine is no longer installed as it was' >&2; exit ${EXIT_INPUT_GONE}; fi
[ -f ${shq(i.modelPath)} ] || { echo 'llmgw-start-input: the model file is gone' >&2; exit ${EXIT_INPUT_GONE}; }
`;
}

export interface StartScriptInput {
  readonly dataDir: string;
  readonly id: string;
  readonly port: number;
  /** Full argv, argv[0] = the binary. */
  readonly argv: readonly string[];
  /** state.json without its closing brace; the script appends pid, procStartTime, startedAt (and the fence's epoch and seq). */
  readonly stateHead: string;
  /** Checked under the owner lock, which is held through the launch. */
  readonly fence?: Fence | null;
  /** The replica's environment (the node's env, then the device visibility llmgw chose). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * What the driver found installed before, checked first (#38: the start is one exec, without the
   * engine's and the model's own scripts): a sh condition that the engine is still installed
   * (engine.ts engineStillInstalled) and the model file's path. Either gone: EXIT_INPUT_GONE, before
   * anything is done, and the driver checks them with their own scripts and starts again.
   */
  readonly inputs?: { readonly engine: string; readonly modelPath: string };
}

/**
 * Start a replica detached: under a lock on the node's replica dir, check that the port is free (not
 * listening, not claimed by a live replica), record it, read the API key from stdin into
 * LLAMA_API_KEY, and launch llama-server in its own session with stdin from /dev/null and output to
 * the replica's log. Prints the pid, the process start time and the start epoch.
 *
 * With a fence, the check and the launch run under the owner lock (taken before the replica dir's
 * lock, released once the replica's state is written), so no start of a superseded epoch can launch
 * after the newer epoch was recorded; the replica (which must outlive the script) does not inherit it.
 */
export function startReplicaScript(s: StartScriptInput): string {
  const portHex = int(s.port).toString(16).toUpperCase().padStart(4, '0');
  const fenced = s.fence ? `fj=",\\"fence\\":{\\"epoch\\":$fe,\\"seq\\":$fence_seq}"\n` : '';
  return `${PRELUDE}
${fenceDefs(s.dataDir, s.fence)}${s.inputs ? inputsCheck(s.inputs) : ''}d=${shq(s.dataDir)}
r="$d/replicas/"${shq(s.id)}
port=${int(s.port)}
command -v setsid >/dev/null 2>&1 || llmgw_fail NODE_COMMAND_FAILED "setsid (util-linux) is not installed on the node"
${fenceAct(s.fence, true)}fj=
${fenced}mkdir -p "$d/replicas" || exit 1
lock="$d/replicas/.lock"
i=0
while ! mkdir "$lock" 2>/dev/null; do
  i=$((i+1))
  if [ $i -gt 150 ]; then rm -rf "$lock"; i=0; fi   # held for 15 s: a dead holder; break it
  sleep 0.1
done
# Cut off from the controller (no pty, no SIGHUP), the script's first write to the gone connection
# would kill it by SIGPIPE, skipping the EXIT trap and leaving the lock for the next start to break
# after 15 s. Ignored, the write fails and the trap runs. (The replica inherits the ignored SIGPIPE:
# its output goes to a file, and llama-server's sockets report EPIPE either way.)
trap '' PIPE
trap 'rmdir "$lock" 2>/dev/null' EXIT
if [ -d "$r" ]; then
  if llmgw_alive "$r"; then echo "replica exists and is running" >&2; exit ${EXIT_REPLICA_EXISTS}; fi
  rm -rf "$r"
fi
if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" && toupper($2) ~ /:${portHex}$/ { f = 1 } END { exit !f }'; then
  echo "port $port is listening" >&2; exit ${EXIT_PORT_TAKEN}
fi
for o in "$d"/replicas/*/ "$d"/rpc/*/; do
  o=\${o%/}
  [ -f "$o/port" ] || continue
  _op=; read -r _op 2>/dev/null <"$o/port" || true
  if [ "$_op" = "$port" ] && llmgw_alive "$o"; then echo "port $port is claimed by $o" >&2; exit ${EXIT_PORT_TAKEN}; fi
done
mkdir -p "$r" || exit 1
printf '%s\\n' "$port" >"$r/port"
key=
IFS= read -r key || true
for v in $(env | sed -n 's/^\\(LLAMA_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset "$v" 2>/dev/null || true; done
# never a replica without a key: llama-server started with no --api-key / LLAMA_API_KEY serves anyone
[ -n "$key" ] || { rm -rf "$r"; llmgw_fail SECRET_INVALID "no engine API key on stdin: a replica is never started without one"; }
LLAMA_API_KEY=$key; export LLAMA_API_KEY
key=
${envExports(s.env ?? {})}
${slotDirMkdir(s.argv)}cd "$r" || exit 1
: >log
started=$(date +%s)
setsid sh -c 'echo $$ >pid && exec "$@"' llmgw-replica ${shJoin(s.argv)} </dev/null >>log 2>&1 7>&- &
unset LLAMA_API_KEY
# the pid file is written (one write, by the replica's shell before it execs llama-server) a few ms
# after the fork: looked for every 5 ms (was 50: #38), for 10 s. Builtins where a command would fork:
# every fork costs ~5-15 ms on a loaded node, and this script is most of a start.
i=0
while [ ! -s pid ]; do
  i=$((i+1)); [ $i -gt 2000 ] && llmgw_fail NODE_COMMAND_FAILED "the replica process did not start"
  sleep 0.005
done
pid=; read -r pid <pid || true
case $pid in ''|*[!0-9]*) llmgw_fail NODE_COMMAND_FAILED "bad pid file";; esac
st=0; llmgw_procstat_vars "$pid" && st=$_ps_start
case $st in ''|*[!0-9]*) st=0;; esac
printf '%s\\n' "$st" >starttime
printf '%s,"pid":%s,"procStartTime":%s,"startedAt":%s000%s}\\n' ${shq(s.stateHead)} "$pid" "$st" "$started" "$fj" >state.json.tmp && mv state.json.tmp state.json
${s.fence ? 'llmgw_fence_unlock\n' : ''}printf 'pid=%s starttime=%s started=%s\\n' "$pid" "$st" "$started"
`;
}

/** The slot-save dir in argv made first (llama-server refuses to start without it); '' when none. */
function slotDirMkdir(argv: readonly string[]): string {
  const i = argv.lastIndexOf('--slot-save-path');
  return i >= 0 && i + 1 < argv.length ? `mkdir -p ${shq(argv[i + 1]!)} || exit 1\n` : '';
}

/** What a start that succeeded printed: the replica's pid, its process start time and the start time (epoch s). */
export interface Started {
  readonly pid: number;
  readonly procStartTime: number;
  readonly startedAtMs: number;
}

/** The `pid= starttime= started=` line of startReplicaScript; null when the output has none. */
export function parseStarted(stdout: string): Started | null {
  const m = /pid=(\d+) starttime=(\d+) started=(\d+)/.exec(stdout);
  if (!m) return null;
  return { pid: Number(m[1]), procStartTime: Number(m[2]), startedAtMs: Number(m[3]) * 1000 };
}
