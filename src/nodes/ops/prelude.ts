/**
 * What every node script shares: the sh library each one starts with (PRELUDE), the disk-full
 * check, the fence glue, the checked-integer and environment helpers.
 *
 * The node operations (one module each under ops/) are POSIX sh scripts the driver runs on a node
 * (over ssh or locally), each beside the parser of what it prints. Every value that comes from a
 * spec, the controller or the node's own files is quoted with shq() or checked numeric, so no value
 * can run a command. Secrets (the engine API key, a download token) arrive on stdin, never in the
 * script text.
 *
 * Failure protocol: a script that fails for a known reason prints `llmgw-error: CODE message` on
 * stderr and exits 3; script-errors.ts turns that into an LlmgwError with that catalogue code.
 * Output protocol for scripts that report several things: sections introduced by `@@<nonce> <name>`
 * lines, where the nonce is random per call (so no log line or file name can forge a section);
 * sections.ts parses them.
 *
 * Fencing (fence.ts): given a Fence, every script that writes checks the node's owner record first,
 * under its lock, and exits EXIT_FENCE_REFUSED when a newer owner or epoch has superseded the fence.
 * Reads (inspect, ports, log tail, file ranges, "is it installed already") are not fenced.
 */
import { LlmgwError } from '../../errors/catalogue.js';
import type { Fence } from '../driver.js';
import { fenceShell } from '../fence.js';
import { shq } from '../shell.js';

export const PRELUDE = `set -u
umask 022
llmgw_fail() { printf 'llmgw-error: %s %s\\n' "$1" "$2" >&2; exit 3; }
llmgw_need() { command -v "$1" >/dev/null 2>&1 || llmgw_fail ENGINE_TOOL_MISSING "'$1' is not installed on the node"; }
# /proc/<pid>/stat fields after the "(comm)" field, read with builtins only (no fork: a start and a
# look run this for every replica on the node, #38): sets _ps_state (field 3), _ps_threads
# (num_threads, field 20) and _ps_start (starttime, field 22).
llmgw_procstat_vars() {
  _s=
  read -r _s 2>/dev/null <"/proc/$1/stat" || [ -n "$_s" ] || return 1
  set -- \${_s##*) }
  [ "$#" -ge 20 ] || return 1
  _ps_state=$1; _ps_threads=\${18}; _ps_start=\${20}
}
# Prints "<state> <starttime> <threads>".
llmgw_procstat() { llmgw_procstat_vars "$1" || return 1; printf '%s %s %s\\n' "$_ps_state" "$_ps_start" "$_ps_threads"; }
# 0 if the process recorded in replica dir $1 is alive: same pid, same start time, not a zombie. A
# zombie thread-group leader whose other threads still run (the process is still exiting, its log not
# yet complete) counts as alive until the last thread is gone.
llmgw_alive() {
  _p=; _t=
  read -r _p 2>/dev/null <"$1/pid" || [ -n "$_p" ] || return 1
  case $_p in ''|*[!0-9]*) return 1;; esac
  read -r _t 2>/dev/null <"$1/starttime" || [ -n "$_t" ] || return 1
  llmgw_procstat_vars "$_p" || return 1
  case $_ps_state in Z|X|x) [ "$_ps_threads" -gt 1 ] 2>/dev/null || return 1;; esac
  [ "$_ps_start" = "$_t" ]
}
llmgw_sha256() { sha256sum "$1" | awk '{print $1}'; }
`;

export const DISK_FULL = String.raw`llmgw_disk_full() {  # fail with NODE_DISK_FULL when the file system of $1 has < 1 MiB left
  _a=$(df -Pk "$1" 2>/dev/null | tail -n 1 | awk '{print $4}')
  case $_a in ''|*[!0-9]*) return 0;; esac
  [ "$_a" -lt 1024 ] && llmgw_fail NODE_DISK_FULL "no space left on the node's data dir ($_a KiB free)"
  return 0
}`;

/** The fence's shell functions, or nothing without a fence. */
export function fenceDefs(dataDir: string, fence: Fence | null | undefined): string {
  return fence ? `${fenceShell(dataDir, fence)}\n` : '';
}

/** Check the fence for an action: refused unless mine; with `hold` the owner lock stays held. */
export function fenceAct(fence: Fence | null | undefined, hold = false): string {
  if (!fence) return '';
  return hold ? 'llmgw_fence_act\n' : 'llmgw_fence_act; llmgw_fence_unlock\n';
}

/** Environment variable names the scripts accept (the node schema's pattern). */
export const ENV_NAME_RE = /^[A-Z][A-Z0-9_]{0,63}$/;
/** Names the scripts refuse: the engine key's (LLAMA_*), the loader's, and the shell's own. */
export const ENV_DENIED_RE = /^(LLAMA_|LD_)|^(PATH|IFS|ENV|BASH_ENV|SHELLOPTS|PS4|CDPATH|HOME)$/;

/** `export K='v'; …` for a node's env (names checked, values quoted). */
export function envExports(env: Readonly<Record<string, string>>): string {
  let out = '';
  for (const [k, v] of Object.entries(env).sort(([a], [b]) => a.localeCompare(b))) {
    if (!ENV_NAME_RE.test(k) || ENV_DENIED_RE.test(k)) {
      throw new LlmgwError('SPEC_INVALID_VALUE', `environment variable name ${JSON.stringify(k)} is not allowed in a node's env (the engine key's LLAMA_*, the loader's LD_* and the shell's own are refused)`, { name: k });
    }
    out += `${k}=${shq(v)}; export ${k}; `;
  }
  return out;
}

/** A value spliced into a script as a number: a non-negative safe integer, or a programming error. */
export function int(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new LlmgwError('INTERNAL', `node script: expected a non-negative integer, got ${n}`, { value: String(n) });
  return n;
}
