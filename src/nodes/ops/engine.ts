/**
 * Engine installs, the parts every method shares: where an engine version lives on the node, its
 * install lock, the common last step; and the small scripts: "is it installed", the staging dir
 * for an upload, its cleanup, and the `path` method. Every install script prints the installed
 * binary's path as its last line (parseInstalledBinary).
 */
import type { Fence } from '../driver.js';
import { shq } from '../shell.js';
import { fenceAct, fenceDefs, PRELUDE } from './prelude.js';
import { lastLine } from './sections.js';

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

/** The staging dir of an install attempt on the node (where an uploaded artifact goes). */
export function engineStageDir(p: Pick<EnginePaths, 'dataDir' | 'engine' | 'version' | 'nonce'>): string {
  return `${p.dataDir}/engines/${p.engine}/.${p.version}.tmp-${p.nonce}`;
}

/** The engine's dir and this attempt's staging dir. */
export function engineStageVars(p: EnginePaths): string {
  return `base=${shq(`${p.dataDir}/engines/${p.engine}`)}
stage="$base/."${shq(`${p.version}.tmp-${p.nonce}`)}`;
}

export function engineVars(p: EnginePaths): string {
  return `${engineStageVars(p)}
final="$base/"${shq(p.version)}
fp=${shq(p.fingerprint)}`;
}

/** Where the install lock of engine@version is: <data dir>/.locks (outside the engine dirs). */
export function engineLockVars(p: EnginePaths): string {
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

/** The binary an install script (or engineInstalledScript) printed; null when it printed none (not installed). */
export function parseInstalledBinary(stdout: string): string | null {
  return stdout.trim() === '' ? null : lastLine(stdout);
}

/**
 * One install of an engine version at a time on the node (a run cut off from the controller keeps
 * going): a lock on fd 8, inherited by the download, build and unpack; after it, a version that the
 * other run installed meanwhile with this fingerprint is reported as installed. With a fence, it is
 * checked before the lock and again after a wait for another install (which may have taken long).
 */
export const engineLock = (fence: Fence | null | undefined): string => `${fenceAct(fence)}mkdir -p "$locks" || exit 1
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

/**
 * A sh condition (exit 0) that engine@version is still installed as the last install or check found
 * it, with `binary` as its binary: what engineInstalledScript and the path method's fast path check,
 * for a start's preflight (#38: the start is then one exec; replica-start.ts `inputs`).
 */
export function engineStillInstalled(p: Omit<EnginePaths, 'nonce' | 'fence'>, method: 'path' | 'artifact' | 'build', binary: string): string {
  const complete = shq(`${p.dataDir}/engines/${p.engine}/${p.version}/.complete`);
  return method === 'path'
    ? `{ _b=${shq(binary)}; [ -f "$_b" ] && [ -x "$_b" ] && _id=$(stat -L -c '%d:%i:%s:%Y' "$_b" 2>/dev/null) && [ "$(cat ${complete} 2>/dev/null)" = "$(printf '%s\n%s\n%s' "$_b" ${shq(p.fingerprint)} "$_id")" ]; }`
    : `{ _f=${complete}; [ -f "$_f" ] && [ "$(sed -n 2p "$_f")" = ${shq(p.fingerprint)} ] && [ "$(head -n 1 "$_f")" = ${shq(binary)} ] && [ -x ${shq(binary)} ]; }`;
}

/**
 * The build an engine's `--version` names (#40: a group's hosts run one build), recorded in `.build`
 * beside `.complete` and listed by each look: llama-server's "version: …" line, else its first line.
 */
const BUILD_LINE = `llmgw_build_line() {  # $1 = what --version printed
  _bl=$(printf '%s\\n' "$1" | sed -n 's/^version: //p' | head -n 1)
  [ -n "$_bl" ] || _bl=$(printf '%s\\n' "$1" | head -n 1)
  printf '%s\\n' "$_bl"
}`;

/** Cleanup on failure, and the common last step: check the binary runs, write .complete, move in place. */
export const ENGINE_FINISH = `llmgw_cleanup() { rm -rf "$stage" \${work:+"$work"}; rmdir "$base" 2>/dev/null; true; }
trap llmgw_cleanup EXIT
# a run cut off from the controller (a partition: no pty, no SIGHUP) keeps going on the node; its
# first write to the gone connection would kill it by SIGPIPE, skipping the EXIT trap and leaving
# the staging dir (a partial archive, a build tree) behind. Ignored, the write fails and the run
# ends through the trap.
trap '' PIPE
${BUILD_LINE}
llmgw_finish() {  # $1 = binary path relative to the stage
  [ -f "$stage/$1" ] || llmgw_fail ENGINE_ARTIFACT_INVALID "the engine has no file '$1' (binary:)"
  chmod +x "$stage/$1" || exit 1
  # an rpc-server beside it (#40) runs too, whatever mode the archive gave it
  _d=$(dirname "$stage/$1"); for _n in rpc-server ggml-rpc-server; do if [ -f "$_d/$_n" ]; then chmod +x "$_d/$_n" || exit 1; fi; done
  if command -v timeout >/dev/null 2>&1; then _v=$(timeout 60 "$stage/$1" --version 2>&1 </dev/null); else _v=$("$stage/$1" --version 2>&1 </dev/null); fi
  [ $? -eq 0 ] || llmgw_fail ENGINE_ARTIFACT_INVALID "'$1' does not run --version on the node: $(printf '%s' "$_v" | tail -n 3 | tr '\\n' ' ')"
  llmgw_build_line "$_v" >"$stage/.build" || exit 1
  printf '%s\\n%s\\n' "$final/$1" "$fp" >"$stage/.complete.tmp" && mv "$stage/.complete.tmp" "$stage/.complete" || exit 1
  rm -rf "$final" && mv "$stage" "$final" || exit 1
  printf '%s\\n' "$final/$1"
}
`;

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

/** Path method: the binary must exist and run `--version` (once while its identity is unchanged); recorded as installed. */
export function pathEngineScript(p: EnginePaths & { readonly path: string }): string {
  return `${PRELUDE}
${fenceDefs(p.dataDir, p.fence)}${engineVars(p)}
${BUILD_LINE}
b=${shq(p.path)}
# a binary that stopped working is no longer recorded as installed
llmgw_path_fail() { rm -rf "$final"; rmdir "$base" 2>/dev/null; llmgw_fail ENGINE_NOT_FOUND "$1"; }
[ -f "$b" ] && [ -x "$b" ] || llmgw_path_fail "$b does not exist or is not executable on the node"
# the binary's identity (device, inode, size, mtime, following links): recorded with it, and while it
# is unchanged the binary is not run again (--version loads every library: ~50 ms a start, #38)
id=$(stat -L -c '%d:%i:%s:%Y' "$b" 2>/dev/null) || id=
if [ -n "$id" ] && [ -f "$final/.build" ] && [ "$(cat "$final/.complete" 2>/dev/null)" = "$(printf '%s\\n%s\\n%s' "$b" "$fp" "$id")" ]; then printf '%s\\n' "$b"; exit 0; fi
if command -v timeout >/dev/null 2>&1; then v=$(timeout 60 "$b" --version 2>&1 </dev/null); else v=$("$b" --version 2>&1 </dev/null); fi
[ $? -eq 0 ] || llmgw_path_fail "$b does not run --version: $(printf '%s' "$v" | tail -n 3 | tr '\\n' ' ')"
if [ -f "$final/.build" ] && [ "$(cat "$final/.complete" 2>/dev/null)" = "$(printf '%s\\n%s\\n%s' "$b" "$fp" "$id")" ]; then printf '%s\\n' "$b"; exit 0; fi
${fenceAct(p.fence)}mkdir -p "$stage" || exit 1
llmgw_build_line "$v" >"$stage/.build" || { rm -rf "$stage"; exit 1; }
printf '%s\\n%s\\n%s\\n' "$b" "$fp" "$id" >"$stage/.complete" || { rm -rf "$stage"; exit 1; }
rm -rf "$final" && mv "$stage" "$final" || { rm -rf "$stage"; exit 1; }
printf '%s\\n' "$b"
`;
}
