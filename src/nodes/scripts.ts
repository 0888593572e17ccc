/**
 * The POSIX sh scripts the node driver runs on a node (over ssh or locally). Every value that comes
 * from a spec, the controller or the node's own files is quoted with shq() or checked numeric, so no
 * value can run a command. Secrets (the engine API key) arrive on stdin, never in the script text.
 *
 * Failure protocol: a script that fails for a known reason prints `llmgw-error: CODE message` on
 * stderr and exits 3; shell-driver.ts turns that into an LlmgwError with that catalogue code.
 * Output protocol for scripts that report several things: sections introduced by `@@<nonce> <name>`
 * lines, where the nonce is random per call (so no log line or file name can forge a section).
 *
 * Fencing (fence.ts): given a Fence, every script that writes checks the node's owner record first,
 * under its lock, and exits EXIT_FENCE_REFUSED when a newer owner or epoch has superseded the fence.
 * Reads (inspect, ports, log tail, file ranges, "is it installed already") are not fenced.
 */
import type { Fence } from './driver.js';
import { NVIDIA_SMI_QUERY } from './devices.js';
import { fenceShell } from './fence.js';
import { shJoin, shq } from './shell.js';

/** Exit code of the start script when the chosen port is taken (the driver picks another). */
export const EXIT_PORT_TAKEN = 75;
/** Exit code of the start script when a live replica with the same id exists. */
export const EXIT_REPLICA_EXISTS = 76;

const PRELUDE = `set -u
umask 022
llmgw_fail() { printf 'llmgw-error: %s %s\\n' "$1" "$2" >&2; exit 3; }
llmgw_need() { command -v "$1" >/dev/null 2>&1 || llmgw_fail ENGINE_TOOL_MISSING "'$1' is not installed on the node"; }
# /proc/<pid>/stat fields after the "(comm)" field: $1 = state (field 3), $18 = num_threads (field 20),
# $20 = starttime (field 22). Prints "<state> <starttime> <threads>".
llmgw_procstat() { _s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; printf '%s\\n' "\${_s##*) }" | awk '{print $1, $20, $18}'; }
# 0 if the process recorded in replica dir $1 is alive: same pid, same start time, not a zombie. A
# zombie thread-group leader whose other threads still run (the process is still exiting, its log not
# yet complete) counts as alive until the last thread is gone.
llmgw_alive() {
  _p=$(cat "$1/pid" 2>/dev/null) || return 1
  case $_p in ''|*[!0-9]*) return 1;; esac
  _t=$(cat "$1/starttime" 2>/dev/null) || return 1
  _x=$(llmgw_procstat "$_p") || return 1
  set -- $_x
  [ "$#" -eq 3 ] || return 1
  case $1 in Z|X|x) [ "$3" -gt 1 ] 2>/dev/null || return 1;; esac
  [ "$2" = "$_t" ]
}
llmgw_sha256() { sha256sum "$1" | awk '{print $1}'; }
`;

/** Engine staging and build dirs older than this (minutes) are leftovers of cut-off installs. */
export const STALE_INSTALL_MINUTES = 24 * 60;

/** The fence's shell functions, or nothing without a fence. */
function fenceDefs(dataDir: string, fence: Fence | null | undefined): string {
  return fence ? `${fenceShell(dataDir, fence)}\n` : '';
}

/** Check the fence for an action: refused unless mine; with `hold` the owner lock stays held. */
function fenceAct(fence: Fence | null | undefined, hold = false): string {
  if (!fence) return '';
  return hold ? 'llmgw_fence_act\n' : 'llmgw_fence_act; llmgw_fence_unlock\n';
}

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
echo ${shq(`${m} now`)}; date +%s
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
echo ${shq(`${m} end`)}
`;
}

/** Environment variable names the scripts accept (the node schema's pattern). */
export const ENV_NAME_RE = /^[A-Z][A-Z0-9_]{0,63}$/;
/** Names the scripts refuse: the engine key's (LLAMA_*), the loader's, and the shell's own. */
export const ENV_DENIED_RE = /^(LLAMA_|LD_)|^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|PS4|CDPATH|HOME)$/;

/** `export K='v'; …` for a node's env (names checked, values quoted). */
export function envExports(env: Readonly<Record<string, string>>): string {
  let out = '';
  for (const [k, v] of Object.entries(env).sort(([a], [b]) => a.localeCompare(b))) {
    if (!ENV_NAME_RE.test(k) || ENV_DENIED_RE.test(k)) throw new Error(`environment variable name ${JSON.stringify(k)} is not allowed`);
    out += `${k}=${shq(v)}; export ${k}; `;
  }
  return out;
}

function replicaLoop(m: string, logLines: number): string {
  return `for r in "$d"/replicas/*/; do
  r=\${r%/}
  [ -f "$r/state.json" ] || continue
  echo ${shq(`${m} replica`)}; printf '%s\\n' "\${r##*/}"
  echo ${shq(`${m} state`)}; cat "$r/state.json"; echo
  if llmgw_alive "$r"; then echo ${shq(`${m} alive`)}; else echo ${shq(`${m} dead`)}; tail -n ${int(logLines)} "$r/log" 2>/dev/null; fi
done`;
}

/** One replica's state, liveness and (when dead) log tail — polled by waitReady. */
export function inspectReplicaScript(dataDir: string, id: string, nonce: string, logLines: number): string {
  const m = `@@${nonce}`;
  return `${PRELUDE}
r=${shq(`${dataDir}/replicas/${id}`)}
[ -f "$r/state.json" ] || { echo ${shq(`${m} missing`)}; exit 0; }
echo ${shq(`${m} state`)}; cat "$r/state.json"; echo
if llmgw_alive "$r"; then echo ${shq(`${m} alive`)}; else echo ${shq(`${m} dead`)}; tail -n ${int(logLines)} "$r/log" 2>/dev/null; fi
echo ${shq(`${m} end`)}
`;
}

/** Ports that are taken: listening sockets (/proc/net/tcp{,6}) and ports claimed by live replicas. */
export function usedPortsScript(dataDir: string, nonce: string): string {
  const m = `@@${nonce}`;
  return `${PRELUDE}
d=${shq(dataDir)}
echo ${shq(`${m} listen`)}; cat /proc/net/tcp /proc/net/tcp6 2>/dev/null
echo ${shq(`${m} claimed`)}
for r in "$d"/replicas/*/; do
  r=\${r%/}
  [ -f "$r/port" ] || continue
  llmgw_alive "$r" && cat "$r/port"
done
echo ${shq(`${m} end`)}
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
${fenceDefs(s.dataDir, s.fence)}d=${shq(s.dataDir)}
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
if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" {print $2}' | grep -qi ':${portHex}$'; then
  echo "port $port is listening" >&2; exit ${EXIT_PORT_TAKEN}
fi
for o in "$d"/replicas/*/; do
  o=\${o%/}
  [ -f "$o/port" ] || continue
  if [ "$(cat "$o/port")" = "$port" ] && llmgw_alive "$o"; then echo "port $port is claimed by $o" >&2; exit ${EXIT_PORT_TAKEN}; fi
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
cd "$r" || exit 1
: >log
started=$(date +%s)
setsid sh -c 'echo $$ >pid.tmp && mv pid.tmp pid && exec "$@"' llmgw-replica ${shJoin(s.argv)} </dev/null >>log 2>&1 7>&- &
unset LLAMA_API_KEY
i=0
while [ ! -s pid ]; do
  i=$((i+1)); [ $i -gt 200 ] && llmgw_fail NODE_COMMAND_FAILED "the replica process did not start"
  sleep 0.05
done
pid=$(cat pid)
case $pid in ''|*[!0-9]*) llmgw_fail NODE_COMMAND_FAILED "bad pid file";; esac
st=$(llmgw_procstat "$pid" | awk '{print $2}')
case $st in ''|*[!0-9]*) st=0;; esac
printf '%s\\n' "$st" >starttime
printf '%s,"pid":%s,"procStartTime":%s,"startedAt":%s000%s}\\n' ${shq(s.stateHead)} "$pid" "$st" "$started" "$fj" >state.json.tmp && mv state.json.tmp state.json
${s.fence ? 'llmgw_fence_unlock\n' : ''}printf 'pid=%s starttime=%s started=%s\\n' "$pid" "$st" "$started"
`;
}

/**
 * SIGTERM, wait up to graceMs, SIGKILL, wait for the process to be gone, remove the replica dir. With a
 * fence: checked before the SIGTERM, and again (held from there to the end) before the SIGKILL and the
 * removal, not through the grace.
 */
export function stopReplicaScript(dataDir: string, id: string, graceMs: number, fence?: Fence | null): string {
  const tenths = Math.max(0, Math.ceil(int(graceMs) / 100));
  return `${PRELUDE}
${fenceDefs(dataDir, fence)}r=${shq(`${dataDir}/replicas/${id}`)}
[ -d "$r" ] || exit 0
${fenceAct(fence)}if llmgw_alive "$r"; then
  pid=$(cat "$r/pid")
  # the replica leads its own session and process group (setsid): signal the whole group
  kill -s TERM -- "-$pid" 2>/dev/null || kill -s TERM "$pid" 2>/dev/null
  i=0
  while llmgw_alive "$r" && [ $i -lt ${tenths} ]; do sleep 0.1; i=$((i+1)); done
fi
${fenceAct(fence, true)}if llmgw_alive "$r"; then
  pid=$(cat "$r/pid")
  kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid" 2>/dev/null
  i=0
  while llmgw_alive "$r" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
  llmgw_alive "$r" && llmgw_fail NODE_COMMAND_FAILED "replica process $pid survived SIGKILL"
fi
# Out of sight in one step, then removed: an observation never sees a half-removed replica (its
# state.json still there, its pid and log gone: "dead, empty log").
g="\${r%/*}/.gone-\${r##*/}-$$"
if mv "$r" "$g" 2>/dev/null; then rm -rf "$g"; else rm -rf "$r"; fi
`;
}

export function logTailScript(dataDir: string, id: string, lines: number): string {
  return `${PRELUDE}
r=${shq(`${dataDir}/replicas/${id}`)}
[ -f "$r/log" ] || llmgw_fail REPLICA_NOT_FOUND ${shq(`no replica ${id} on this node`)}
tail -n ${int(lines)} "$r/log"
`;
}

/**
 * Bytes [offset, offset+length) of a file on the node, base64 on one line after a `size=<bytes>` line
 * (for reading a GGUF header where the file is: file:// model sources on remote nodes).
 */
export function readRangeScript(path: string, offset: number, length: number): string {
  return `${PRELUDE}
f=${shq(path)}
[ -f "$f" ] || llmgw_fail MODEL_FILE_NOT_FOUND ${shq(`no such file on the node: ${path}`)}
[ -r "$f" ] || llmgw_fail MODEL_FILE_NOT_FOUND ${shq(`the file is not readable on the node: ${path}`)}
llmgw_need base64
printf 'size=%s\\n' "$(wc -c < "$f" | tr -d ' ')"
tail -c +${int(offset) + 1} "$f" | head -c ${int(length)} | base64 | tr -d '\\n'
echo
`;
}

// ---------------------------------------------------------------------------------------------
// Engines

export interface EnginePaths {
  readonly dataDir: string;
  readonly engine: string;
  readonly version: string;
  /** Unique per install attempt: names the staging dir. */
  readonly nonce: string;
  /** Written into .complete; a different fingerprint means the version's definition changed. */
  readonly fingerprint: string;
  /** Checked before the install writes (and again when it waited for another install). */
  readonly fence?: Fence | null;
}

/** The engine's dir and this attempt's staging dir. */
function engineStageVars(p: EnginePaths): string {
  return `base=${shq(`${p.dataDir}/engines/${p.engine}`)}
stage="$base/."${shq(`${p.version}.tmp-${p.nonce}`)}`;
}

function engineVars(p: EnginePaths): string {
  return `${engineStageVars(p)}
final="$base/"${shq(p.version)}
fp=${shq(p.fingerprint)}`;
}

/** Where the install lock of engine@version is: <data dir>/.locks (outside the engine dirs). */
function engineLockVars(p: EnginePaths): string {
  return `locks=${shq(`${p.dataDir}/.locks`)}
lockname=${shq(`engine-${p.engine}@${p.version}.lock`)}`;
}

/** Prints the installed binary's path when engine@version is installed with this fingerprint. */
export function engineInstalledScript(p: Omit<EnginePaths, 'nonce'>): string {
  return `${PRELUDE}
f=${shq(`${p.dataDir}/engines/${p.engine}/${p.version}/.complete`)}
[ -f "$f" ] || exit 0
[ "$(sed -n 2p "$f")" = ${shq(p.fingerprint)} ] || exit 0
b=$(head -n 1 "$f")
[ -x "$b" ] && printf '%s\\n' "$b"
exit 0
`;
}

/**
 * One install of an engine version at a time on the node (a run cut off from the controller keeps
 * going): a lock on fd 8, inherited by the download, build and unpack; after it, a version that the
 * other run installed meanwhile with this fingerprint is reported as installed. With a fence, it is
 * checked before the lock and again after a wait for another install (which may have taken long).
 */
const engineLock = (fence: Fence | null | undefined): string => `${fenceAct(fence)}mkdir -p "$locks" || exit 1
exec 8>>"$locks/$lockname" || exit 1
if ! flock -n 8; then
  echo "another install of this engine is running on the node; waiting for it" >&2
  flock 8 || exit 1
${fence ? `  ${fenceAct(fence)}` : ''}fi
if [ -f "$final/.complete" ] && [ "$(sed -n 2p "$final/.complete")" = "$fp" ] && [ -x "$(head -n 1 "$final/.complete")" ]; then
  rm -rf "$stage" \${work:+"$work"}
  head -n 1 "$final/.complete"
  exit 0
fi
`;

/** Cleanup on failure, and the common last step: check the binary runs, write .complete, move in place. */
const ENGINE_FINISH = `llmgw_cleanup() { rm -rf "$stage" \${work:+"$work"}; rmdir "$base" 2>/dev/null; true; }
trap llmgw_cleanup EXIT
# a run cut off from the controller (a partition: no pty, no SIGHUP) keeps going on the node; its
# first write to the gone connection would kill it by SIGPIPE, skipping the EXIT trap and leaving
# the staging dir (a partial archive, a build tree) behind. Ignored, the write fails and the run
# ends through the trap.
trap '' PIPE
llmgw_finish() {  # $1 = binary path relative to the stage
  [ -f "$stage/$1" ] || llmgw_fail ENGINE_ARTIFACT_INVALID "the engine has no file '$1' (binary:)"
  chmod +x "$stage/$1" || exit 1
  if command -v timeout >/dev/null 2>&1; then _v=$(timeout 60 "$stage/$1" --version 2>&1 </dev/null); else _v=$("$stage/$1" --version 2>&1 </dev/null); fi
  [ $? -eq 0 ] || llmgw_fail ENGINE_ARTIFACT_INVALID "'$1' does not run --version on the node: $(printf '%s' "$_v" | tail -n 3 | tr '\\n' ' ')"
  printf '%s\\n%s\\n' "$final/$1" "$fp" >"$stage/.complete.tmp" && mv "$stage/.complete.tmp" "$stage/.complete" || exit 1
  rm -rf "$final" && mv "$stage" "$final" || exit 1
  printf '%s\\n' "$final/$1"
}
`;

/**
 * Artifact install. With `url` the node downloads it (curl or wget); without, the controller has
 * uploaded it to "$stage/.artifact" already. Then: verify sha256, unpack (tar.gz / tar / zip),
 * check the binary runs, mark complete.
 */
export function artifactInstallScript(p: EnginePaths & { readonly url: string | null; readonly sha256: string; readonly binary: string }): string {
  const download = p.url === null
    ? `[ -f "$stage/.artifact" ] || llmgw_fail ENGINE_DOWNLOAD_FAILED "the uploaded artifact is missing"`
    : `url=${shq(p.url)}
mkdir -p "$stage" || exit 1
if command -v curl >/dev/null 2>&1; then
  curl -fsSL --retry 2 --connect-timeout 30 -o "$stage/.artifact" "$url" 2>"$stage/.err"; rc=$?
elif command -v wget >/dev/null 2>&1; then
  wget -q -O "$stage/.artifact" "$url" 2>"$stage/.err"; rc=$?
else
  llmgw_fail ENGINE_TOOL_MISSING "neither curl nor wget is installed on the node"
fi
if [ $rc -ne 0 ]; then
  cat "$stage/.err" >&2
  llmgw_disk_full "$stage"
  llmgw_fail ENGINE_DOWNLOAD_FAILED "download of $url failed (exit $rc): $(tail -n 2 "$stage/.err" | tr '\\n' ' ')"
fi`;
  return `${PRELUDE}
${fenceDefs(p.dataDir, p.fence)}${engineVars(p)}
${engineLockVars(p)}
sha=${shq(p.sha256)}
bin=${shq(p.binary)}
${DISK_FULL}
${ENGINE_FINISH}
llmgw_need sha256sum
llmgw_need flock
${engineLock(p.fence)}${download}
got=$(llmgw_sha256 "$stage/.artifact")
[ "$got" = "$sha" ] || llmgw_fail ENGINE_CHECKSUM_MISMATCH "artifact sha256 is $got, engines/ says $sha"
magic=$(od -An -tx1 -N4 "$stage/.artifact" | tr -d ' \\n')
case $magic in
  1f8b*) llmgw_need tar; tar -xzf "$stage/.artifact" -C "$stage" 2>"$stage/.err" || { cat "$stage/.err" >&2; llmgw_disk_full "$stage"; llmgw_fail ENGINE_ARTIFACT_INVALID "tar could not unpack the artifact"; } ;;
  504b0304) llmgw_need unzip; unzip -q -o "$stage/.artifact" -d "$stage" 2>"$stage/.err" || { cat "$stage/.err" >&2; llmgw_disk_full "$stage"; llmgw_fail ENGINE_ARTIFACT_INVALID "unzip could not unpack the artifact"; } ;;
  *) if [ "$(od -An -c -j257 -N5 "$stage/.artifact" | tr -d ' \\n')" = ustar ]; then
       llmgw_need tar; tar -xf "$stage/.artifact" -C "$stage" || llmgw_fail ENGINE_ARTIFACT_INVALID "tar could not unpack the artifact"
     else llmgw_fail ENGINE_ARTIFACT_INVALID "the artifact is not a tar.gz, tar or zip archive"; fi ;;
esac
rm -f "$stage/.artifact" "$stage/.err"
llmgw_finish "$bin"
`;
}

/** Make the staging dir (before the controller uploads an artifact into it). */
export function engineStageScript(p: EnginePaths): string {
  return `${PRELUDE}
${fenceDefs(p.dataDir, p.fence)}${engineStageVars(p)}
${fenceAct(p.fence)}mkdir -p "$stage" || exit 1
`;
}

export function engineCleanupScript(p: EnginePaths): string {
  return `${PRELUDE}
${engineStageVars(p)}
rm -rf "$stage"
rmdir "$base" 2>/dev/null
exit 0
`;
}

const DISK_FULL = String.raw`llmgw_disk_full() {  # fail with NODE_DISK_FULL when the file system of $1 has < 1 MiB left
  _a=$(df -Pk "$1" 2>/dev/null | tail -n 1 | awk '{print $4}')
  case $_a in ''|*[!0-9]*) return 0;; esac
  [ "$_a" -lt 1024 ] && llmgw_fail NODE_DISK_FULL "no space left on the node's data dir ($_a KiB free)"
  return 0
}`;

/**
 * Build from git (a URL or a bundle path) at ref with cmake: Release, GGML_NATIVE=ON (the node's own
 * CPU flags), an $ORIGIN rpath, the spec's flags; ccache as the compiler launcher when the node has it
 * (with CCACHE_BASEDIR so a rebuild in another directory hits the cache). Copies the target binary and
 * every shared library into the engine dir.
 */
export function buildInstallScript(p: EnginePaths & { readonly git: string; readonly ref: string; readonly cmakeFlags: readonly string[]; readonly target: string; readonly jobs: number | null }): string {
  return `${PRELUDE}
${fenceDefs(p.dataDir, p.fence)}${engineVars(p)}
${engineLockVars(p)}
work="$base/."${shq(`${p.version}.build-${p.nonce}`)}
target=${shq(p.target)}
${DISK_FULL}
${ENGINE_FINISH}
llmgw_need git
llmgw_need cmake
command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 || llmgw_fail ENGINE_TOOL_MISSING "no C++ compiler (c++, g++ or clang++) is installed on the node"
command -v make >/dev/null 2>&1 || command -v ninja >/dev/null 2>&1 || llmgw_fail ENGINE_TOOL_MISSING "neither make nor ninja is installed on the node"
llmgw_need flock
${engineLock(p.fence)}mkdir -p "$work" "$stage" || exit 1
log="$work/build.log"
llmgw_build_fail() { tail -n 40 "$log" >&2; llmgw_disk_full "$work"; llmgw_fail "$1" "$2"; }
git clone --quiet ${shq(p.git)} "$work/src" >>"$log" 2>&1 || llmgw_build_fail ENGINE_DOWNLOAD_FAILED "git clone failed"
git -C "$work/src" -c advice.detachedHead=false checkout --quiet --detach ${shq(p.ref)} >>"$log" 2>&1 || llmgw_build_fail ENGINE_BUILD_FAILED ${shq(`git ref '${p.ref}' not found`)}
# one locale for every build: compiler messages stay parseable, and ccache (which hashes the locale
# variables) hits across sessions whatever the login environment is
LANG=C; LC_ALL=C; LC_CTYPE=C; LC_MESSAGES=C; export LANG LC_ALL LC_CTYPE LC_MESSAGES
launcher=
if command -v ccache >/dev/null 2>&1; then
  launcher="-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  CCACHE_BASEDIR=$work; CCACHE_NOHASHDIR=true; export CCACHE_BASEDIR CCACHE_NOHASHDIR
fi
jobs=${p.jobs === null ? '$(nproc 2>/dev/null || echo 2)' : String(int(p.jobs))}
cmake -S "$work/src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON '-DCMAKE_BUILD_RPATH=$ORIGIN' '-DCMAKE_INSTALL_RPATH=$ORIGIN' $launcher ${shJoin(p.cmakeFlags)} >>"$log" 2>&1 || llmgw_build_fail ENGINE_BUILD_FAILED "cmake configure failed"
cmake --build "$work/build" --target "$target" -j "$jobs" >>"$log" 2>&1 || llmgw_build_fail ENGINE_BUILD_FAILED "cmake --build failed"
b=$(find "$work/build" -type f -name "$target" -perm -u+x | head -n 1)
[ -n "$b" ] || llmgw_build_fail ENGINE_BUILD_FAILED "the build produced no '$target' binary"
cp "$b" "$stage/" || llmgw_build_fail NODE_COMMAND_FAILED "copy failed"
find "$work/build" -name '*.so*' \\( -type f -o -type l \\) -exec cp -P {} "$stage/" \\; || llmgw_build_fail NODE_COMMAND_FAILED "copying shared libraries failed"
rm -rf "$work"; work=
llmgw_finish "$target"
`;
}

/** Path method: the binary must exist and run `--version`; recorded as installed. */
export function pathEngineScript(p: EnginePaths & { readonly path: string }): string {
  return `${PRELUDE}
${fenceDefs(p.dataDir, p.fence)}${engineVars(p)}
b=${shq(p.path)}
# a binary that stopped working is no longer recorded as installed
llmgw_path_fail() { rm -rf "$final"; rmdir "$base" 2>/dev/null; llmgw_fail ENGINE_NOT_FOUND "$1"; }
[ -f "$b" ] && [ -x "$b" ] || llmgw_path_fail "$b does not exist or is not executable on the node"
if command -v timeout >/dev/null 2>&1; then v=$(timeout 60 "$b" --version 2>&1 </dev/null); else v=$("$b" --version 2>&1 </dev/null); fi
[ $? -eq 0 ] || llmgw_path_fail "$b does not run --version: $(printf '%s' "$v" | tail -n 3 | tr '\\n' ' ')"
if [ "$(cat "$final/.complete" 2>/dev/null)" = "$(printf '%s\\n%s' "$b" "$fp")" ]; then printf '%s\\n' "$b"; exit 0; fi
${fenceAct(p.fence)}mkdir -p "$stage" || exit 1
printf '%s\\n%s\\n' "$b" "$fp" >"$stage/.complete" || { rm -rf "$stage"; exit 1; }
rm -rf "$final" && mv "$stage" "$final" || { rm -rf "$stage"; exit 1; }
printf '%s\\n' "$b"
`;
}

// ---------------------------------------------------------------------------------------------
// Models

/**
 * Model from a URL: download to <sha>.gguf.part (resuming a previous part), verify, rename. With
 * `tokenSecret` (the secret's name, for messages) the script reads a bearer token from its stdin and
 * hands it to curl on a pipe (`-H @-`), so it is in no argv; curl drops it on a redirect to another
 * host (Hugging Face redirects to a signed CDN URL). wget is refused then: it sends a header given
 * in its wgetrc on to the host a redirect leads to (seen with wget 1.21.3).
 */
export function modelFromUrlScript(dataDir: string, sha256: string, url: string, tokenSecret: string | null = null, fence?: Fence | null): string {
  const sent = tokenSecret === null ? '' : `; sent the bearer token from secret '${tokenSecret}'`;
  const curl = (resume: boolean): string => {
    const args = `-fsSL --retry 2 --connect-timeout 30${resume ? ' -C -' : ''} -o "$part" "$url" 2>"$err"`;
    return tokenSecret === null ? `curl ${args}` : `printf 'Authorization: Bearer %s\\n' "$tok" | curl -H @- ${args}`;
  };
  const wget = (resume: boolean): string =>
    tokenSecret === null
      ? `wget -q${resume ? ' -c' : ''} -O "$part" "$url" 2>"$err"`
      : `llmgw_fail ENGINE_TOOL_MISSING ${shq(`a download with token: needs curl on the node (wget would send the token on to the host the source redirects to)`)}`;
  const tokenSetup =
    tokenSecret === null ? '' : `IFS= read -r tok || [ -n "$tok" ] || llmgw_fail SECRET_NOT_FOUND ${shq(`no token on stdin for secret '${tokenSecret}'`)}`;
  return `${PRELUDE}
${fenceDefs(dataDir, fence)}${DISK_FULL}
m=${shq(`${dataDir}/models`)}
locks=${shq(`${dataDir}/.locks`)}
final="$m/"${shq(`${sha256}.gguf`)}
part="$final.part"
sha=${shq(sha256)}
url=${shq(url)}
if [ -f "$final" ]; then stat -c %s "$final" 2>/dev/null || wc -c <"$final"; exit 0; fi
llmgw_need sha256sum
llmgw_need flock
${fenceAct(fence)}mkdir -p "$m" || exit 1
# one download of this file at a time: a run whose connection was cut keeps going on the node (no
# pty, no SIGHUP), and a second curl -C - on the same part would interleave bytes. The lock is on
# fd 9, which curl inherits: it is held until the last process of a download exits, dead or alive.
mkdir -p "$locks" || exit 1
exec 9>>"$locks/model-$sha.lock" || exit 1
if ! flock -n 9; then
  echo "another download of this file is running on the node; waiting for it" >&2
  flock 9 || exit 1
${fence ? `  if [ -f "$final" ]; then stat -c %s "$final" 2>/dev/null || wc -c <"$final"; exit 0; fi
  ${fenceAct(fence)}` : ''}fi
if [ -f "$final" ]; then stat -c %s "$final" 2>/dev/null || wc -c <"$final"; exit 0; fi
err="$part.err"
${tokenSetup}
llmgw_get() {  # $1 = resume (1/0)
  if command -v curl >/dev/null 2>&1; then
    if [ "$1" = 1 ]; then ${curl(true)}; else ${curl(false)}; fi
  elif command -v wget >/dev/null 2>&1; then
    if [ "$1" = 1 ]; then ${wget(true)}; else ${wget(false)}; fi
  else
    llmgw_fail ENGINE_TOOL_MISSING "neither curl nor wget is installed on the node"
  fi
}
llmgw_get 1; rc=$?
if [ $rc -ne 0 ]; then
  if [ -f "$part" ] && [ "$(llmgw_sha256 "$part")" = "$sha" ]; then
    rc=0   # the part was already complete (416 on resume)
  else
    # no range support, or a bad part: start over once
    cat "$err" >&2; rm -f "$part"; llmgw_get 0; rc=$?
  fi
fi
if [ $rc -ne 0 ]; then
  why=$(tail -n 2 "$err" 2>/dev/null | tr '\\n' ' ')
  cat "$err" >&2; rm -f "$err"
  llmgw_disk_full "$m"
  llmgw_fail MODEL_DOWNLOAD_FAILED "download of $url failed (exit $rc${sent}): $why"
fi
rm -f "$err"
got=$(llmgw_sha256 "$part")
if [ "$got" != "$sha" ]; then rm -f "$part"; llmgw_fail MODEL_CHECKSUM_MISMATCH "downloaded file has sha256 $got, the model says $sha"; fi
mv "$part" "$final" || exit 1
stat -c %s "$final" 2>/dev/null || wc -c <"$final"
`;
}

/** Model from a file already on the node: verify, then hard-link (or copy) into the cache. */
export function modelFromFileScript(dataDir: string, sha256: string, path: string, fence?: Fence | null): string {
  return `${PRELUDE}
${fenceDefs(dataDir, fence)}${DISK_FULL}
m=${shq(`${dataDir}/models`)}
final="$m/"${shq(`${sha256}.gguf`)}
sha=${shq(sha256)}
src=${shq(path)}
if [ -f "$final" ]; then stat -c %s "$final" 2>/dev/null || wc -c <"$final"; exit 0; fi
[ -f "$src" ] || llmgw_fail MODEL_FILE_NOT_FOUND "$src does not exist on the node"
llmgw_need sha256sum
got=$(llmgw_sha256 "$src") || llmgw_fail MODEL_FILE_NOT_FOUND "$src is not readable on the node"
[ "$got" = "$sha" ] || llmgw_fail MODEL_CHECKSUM_MISMATCH "$src has sha256 $got, the model says $sha"
${fenceAct(fence)}mkdir -p "$m" || exit 1
tmp="$final.part.$$"
if ! ln -f "$src" "$tmp" 2>/dev/null; then
  cp "$src" "$tmp" || { rm -f "$tmp"; llmgw_disk_full "$m"; llmgw_fail NODE_COMMAND_FAILED "copying $src failed"; }
fi
mv "$tmp" "$final" || { rm -f "$tmp"; exit 1; }
stat -c %s "$final" 2>/dev/null || wc -c <"$final"
`;
}

function int(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`expected a non-negative integer, got ${n}`);
  return n;
}
