/** Stop a replica: its process group signalled, then its dir removed. Prints nothing; success is exit 0. */
import type { Fence } from '../driver.js';
import { shq } from '../shell.js';
import { fenceAct, fenceDefs, int, PRELUDE } from './prelude.js';

/**
 * SIGTERM, wait up to graceMs, SIGKILL, wait for the process to be gone, remove the replica dir. With a
 * fence: checked before the SIGTERM, and again (held from there to the end) before the SIGKILL and the
 * removal, not through the grace. `dir`: replicas/, or rpc/ for an RPC worker (ops/rpc-worker.ts).
 */
export function stopReplicaScript(dataDir: string, id: string, graceMs: number, fence?: Fence | null, dir: 'replicas' | 'rpc' = 'replicas'): string {
  const tenths = Math.max(0, Math.ceil(int(graceMs) / 100));
  return `${PRELUDE}
${fenceDefs(dataDir, fence)}r=${shq(`${dataDir}/${dir}/${id}`)}
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
