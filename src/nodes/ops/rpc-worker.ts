/**
 * RPC workers (issue #40): llama.cpp's rpc-server on a node, serving its memory and compute to a head
 * llama-server elsewhere (`llama-server --rpc host:port`). The start and stop scripts, the observe
 * loop, and the parsing of what they print.
 *
 * Layout on the node, beside replicas/: rpc/<id>/ holds port, pid, starttime, state.json and log,
 * written like a replica's (so llmgw_alive, the port checks and a stop work the same way).
 *
 * The RPC protocol has no authentication and no encryption: rpc-server binds one IPv4 address
 * only, the node's listen_address or 127.0.0.1, never a wildcard (refused here and again on the
 * node: RPC_BIND_REFUSED), and the start checks that it listens on exactly that address.
 */
import { isIP } from 'node:net';
import { LlmgwError } from '../../errors/catalogue.js';
import type { Fence, ReplicaFailure, RpcWorkerObservation } from '../driver.js';
import { shJoin, shq } from '../shell.js';
import { envExports, fenceAct, fenceDefs, int, PRELUDE } from './prelude.js';
import { EXIT_PORT_TAKEN, EXIT_REPLICA_EXISTS } from './replica-start.js';
import { stopReplicaScript } from './replica-stop.js';
import { tailOf } from './sections.js';

/** The names rpc-server has beside llama-server, first found wins (llama.cpp's target is ggml-rpc-server in newer trees). */
export const RPC_SERVER_NAMES = ['rpc-server', 'ggml-rpc-server'] as const;

/** How long the start script waits for rpc-server to listen (tenths of a second). */
export const RPC_LISTEN_WAIT_TENTHS = 300;

/**
 * Why `host` may not be an RPC worker's bind address, or null when it may: rpc-server takes one
 * IPv4 address (inet_addr), and 0.0.0.0 (any spelling of it) would expose an unauthenticated
 * protocol on every interface.
 */
export function rpcBindRefusal(host: string): string | null {
  if (isIP(host) !== 4) return `'${host}' is not an IPv4 address (rpc-server binds one IPv4 address: the node's listen_address or 127.0.0.1)`;
  if (host.split('.').every((o) => Number(o) === 0)) return `'${host}' binds every interface; the RPC protocol has no authentication or encryption, so rpc-server binds only the node's listen_address or 127.0.0.1`;
  return null;
}

/** An IPv4 address as /proc/net/tcp writes a local address: the 4 bytes in host (little-endian) order, upper-case hex. */
export function procNetTcpAddr(host: string): string {
  return host.split('.').map((o) => int(Number(o)).toString(16).toUpperCase().padStart(2, '0')).reverse().join('');
}

/** rpc-server's argv after the binary (which the node script resolves beside the engine's llama-server). */
export function rpcWorkerArgs(host: string, port: number, threads: number | null): string[] {
  return ['--host', host, '--port', String(int(port)), ...(threads !== null ? ['--threads', String(int(threads))] : [])];
}

export interface RpcWorkerStartInput {
  readonly dataDir: string;
  readonly id: string;
  readonly host: string;
  readonly port: number;
  /** The engine's llama-server on the node; rpc-server is looked for beside it. */
  readonly engineBinary: string;
  /** rpc-server's arguments (rpcWorkerArgs). */
  readonly args: readonly string[];
  /** state.json without its closing brace; the script appends the binary, pid, procStartTime, startedAt. */
  readonly stateHead: string;
  readonly fence?: Fence | null;
  readonly env?: Readonly<Record<string, string>>;
}

/**
 * Start rpc-server detached (its own session, like a replica): refuse a wildcard address (here,
 * RPC_BIND_REFUSED, and again on the node), find
 * rpc-server beside the engine (ENGINE_NO_RPC), under the replicas' lock check that the port is free
 * (not listening, not claimed by a live replica or worker; else EXIT_PORT_TAKEN), record the claim,
 * launch; then wait until it listens on exactly host:port. A worker that exits first fails with
 * RPC_WORKER_EXITED and its log; one that does not listen in time is stopped (RPC_WORKER_START_TIMEOUT).
 * Prints the pid, the process start time and the start epoch (parseStarted).
 */
export function rpcWorkerStartScript(s: RpcWorkerStartInput): string {
  const refusal = rpcBindRefusal(s.host);
  if (refusal !== null) throw new LlmgwError('RPC_BIND_REFUSED', `rpc worker ${s.id}: ${refusal}`, { host: s.host });
  const portHex = int(s.port).toString(16).toUpperCase().padStart(4, '0');
  const listenAt = `${procNetTcpAddr(s.host)}:${portHex}`;
  const names = RPC_SERVER_NAMES.map((n) => shq(n)).join(' ');
  return `${PRELUDE}
${fenceDefs(s.dataDir, s.fence)}d=${shq(s.dataDir)}
r="$d/rpc/"${shq(s.id)}
host=${shq(s.host)}
port=${int(s.port)}
# refused before rendering (rpcBindRefusal); checked again here, on the node
case $host in ''|0.0.0.0|0|::|'[::]') llmgw_fail RPC_BIND_REFUSED "rpc-server never binds a wildcard address ($host)";; esac
command -v setsid >/dev/null 2>&1 || llmgw_fail NODE_COMMAND_FAILED "setsid (util-linux) is not installed on the node"
e=${shq(s.engineBinary)}
bin=
for n in ${names}; do [ -x "\${e%/*}/$n" ] && { bin="\${e%/*}/$n"; break; }; done
[ -n "$bin" ] || llmgw_fail ENGINE_NO_RPC "the engine at \${e%/*} has no rpc-server beside llama-server (build it with -DGGML_RPC=ON)"
${fenceAct(s.fence, true)}mkdir -p "$d/replicas" "$d/rpc" || exit 1
lock="$d/replicas/.lock"
i=0
while ! mkdir "$lock" 2>/dev/null; do
  i=$((i+1))
  if [ $i -gt 150 ]; then rm -rf "$lock"; i=0; fi   # held for 15 s: a dead holder; break it
  sleep 0.1
done
trap '' PIPE
trap 'rmdir "$lock" 2>/dev/null' EXIT
if [ -d "$r" ]; then
  if llmgw_alive "$r"; then echo "rpc worker exists and is running" >&2; exit ${EXIT_REPLICA_EXISTS}; fi
  rm -rf "$r"
fi
if cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" {print $2}' | grep -qi ':${portHex}$'; then
  echo "port $port is listening" >&2; exit ${EXIT_PORT_TAKEN}
fi
for o in "$d"/replicas/*/ "$d"/rpc/*/; do
  o=\${o%/}
  [ -f "$o/port" ] || continue
  if [ "$(cat "$o/port")" = "$port" ] && llmgw_alive "$o"; then echo "port $port is claimed by $o" >&2; exit ${EXIT_PORT_TAKEN}; fi
done
mkdir -p "$r" || exit 1
printf '%s\\n' "$port" >"$r/port"
${envExports(s.env ?? {})}
cd "$r" || exit 1
: >log
started=$(date +%s)
# its stdout line-buffered where the node has stdbuf: the banner (endpoint, devices and their memory)
# is in the log even when the worker is killed
if command -v stdbuf >/dev/null 2>&1; then
  setsid sh -c 'echo $$ >pid.tmp && mv pid.tmp pid && exec "$@"' llmgw-rpc-worker stdbuf -oL "$bin" ${shJoin(s.args)} </dev/null >>log 2>&1 7>&- &
else
  setsid sh -c 'echo $$ >pid.tmp && mv pid.tmp pid && exec "$@"' llmgw-rpc-worker "$bin" ${shJoin(s.args)} </dev/null >>log 2>&1 7>&- &
fi
i=0
while [ ! -s pid ]; do
  i=$((i+1)); [ $i -gt 200 ] && llmgw_fail NODE_COMMAND_FAILED "the rpc worker process did not start"
  sleep 0.05
done
pid=$(cat pid)
case $pid in ''|*[!0-9]*) llmgw_fail NODE_COMMAND_FAILED "bad pid file";; esac
st=$(llmgw_procstat "$pid" | awk '{print $2}')
case $st in ''|*[!0-9]*) st=0;; esac
printf '%s\\n' "$st" >starttime
printf '%s,"binary":"%s","pid":%s,"procStartTime":%s,"startedAt":%s000}\\n' ${shq(s.stateHead)} "$(printf '%s' "$bin" | sed 's/[\\\\"]/\\\\&/g')" "$pid" "$st" "$started" >state.json.tmp && mv state.json.tmp state.json
${s.fence ? 'llmgw_fence_unlock\n' : ''}rmdir "$lock" 2>/dev/null; trap - EXIT
# up: listening on exactly host:port (its /proc/net/tcp local address)
i=0
until awk '$4 == "0A" {print $2}' /proc/net/tcp 2>/dev/null | grep -qi '^${listenAt}$'; do
  if ! llmgw_alive "$r"; then
    tail -n 40 log >&2
    llmgw_fail RPC_WORKER_EXITED "rpc-server exited at start: $(grep -v '^[[:space:]]*$' log | tail -n 1)"
  fi
  i=$((i+1))
  if [ $i -gt ${RPC_LISTEN_WAIT_TENTHS} ]; then
    kill -s KILL -- "-$pid" 2>/dev/null || kill -s KILL "$pid" 2>/dev/null
    tail -n 40 log >&2
    llmgw_fail RPC_WORKER_START_TIMEOUT "rpc-server did not listen on $host:$port within ${RPC_LISTEN_WAIT_TENTHS / 10} s"
  fi
  sleep 0.1
done
printf 'pid=%s starttime=%s started=%s\\n' "$pid" "$st" "$started"
`;
}

/** The observe script's loop over rpc/<id>/: state.json, alive (and listening on its port) or dead with the log tail. */
export function rpcWorkerObserveLoop(m: string, logLines: number): string {
  return `for w in "$d"/rpc/*/; do
  w=\${w%/}
  [ -f "$w/state.json" ] || continue
  echo ${shq(`${m} rpc`)}; printf '%s\\n' "\${w##*/}"
  echo ${shq(`${m} rpc-state`)}; cat "$w/state.json"; echo
  if llmgw_alive "$w"; then
    echo ${shq(`${m} rpc-alive`)}
    wp=$(cat "$w/port" 2>/dev/null)
    case $wp in ''|*[!0-9]*) ;; *) awk '$4 == "0A" {print $2}' /proc/net/tcp 2>/dev/null | grep -i ":$(printf '%04X' "$wp")$" ;; esac
  else echo ${shq(`${m} rpc-dead`)}; tail -n ${int(logLines)} "$w/log" 2>/dev/null; fi
done`;
}

/** A worker's state.json as the start script wrote it. */
export interface RpcWorkerState {
  readonly id: string;
  /** What the worker serves (the group's model), recorded, not interpreted. */
  readonly group: string;
  readonly host: string;
  readonly port: number;
  readonly binary: string;
  readonly pid: number;
  readonly startedAt: number;
}

/** A worker's state.json; null when it is not one. */
export function parseRpcWorkerState(text: string): RpcWorkerState | null {
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    const str = (k: string) => (typeof j[k] === 'string' ? (j[k] as string) : '');
    const num = (k: string) => (typeof j[k] === 'number' ? (j[k] as number) : NaN);
    const st = { id: str('id'), group: str('group'), host: str('host'), port: num('port'), binary: str('binary'), pid: num('pid'), startedAt: num('startedAt') };
    return Number.isInteger(st.port) && Number.isInteger(st.pid) ? st : null;
  } catch {
    return null;
  }
}

/** A dead worker's failure, with its last non-empty log line (rpc-server's own words when it failed: a bind error, an abort; a killed one's says nothing). */
export function rpcWorkerFailure(logTail: string): ReplicaFailure {
  const last = logTail.split('\n').map((l) => l.trim()).filter((l) => l !== '').pop();
  return { code: 'RPC_WORKER_EXITED', message: last ? `rpc-server exited; its last log line: ${last}` : 'rpc-server exited (its log is empty)', logTail: tailOf(logTail, 40) };
}

/** Stop a worker as a replica is stopped (its process group: TERM, KILL after graceMs), then remove rpc/<id>. */
export function rpcWorkerStopScript(dataDir: string, id: string, graceMs: number, fence?: Fence | null): string {
  return stopReplicaScript(dataDir, id, graceMs, fence, 'rpc');
}

/** One worker from the observe loop's sections: alive and listening is ready; alive only, starting; dead, failed with its log. */
export function rpcWorkerObservation(id: string, stateText: string, alive: boolean, listening: boolean, logTail: string): RpcWorkerObservation {
  const st = parseRpcWorkerState(stateText);
  if (st === null) {
    return { id, group: '', host: '', port: 0, pid: 0, startedAt: 0, state: 'failed', failure: { code: 'RPC_WORKER_EXITED', message: `rpc worker ${id}: state.json is unreadable`, logTail } };
  }
  const base = { id, group: st.group, host: st.host, port: st.port, pid: st.pid, startedAt: st.startedAt };
  if (!alive) return { ...base, state: 'failed', failure: rpcWorkerFailure(logTail) };
  return { ...base, state: listening ? 'ready' : 'starting' };
}
