/** Engine install by the artifact method: download (or take the upload), verify, unpack, check it runs. */
import { shq } from '../shell.js';
import { engineLock, engineLockVars, engineVars, ENGINE_FINISH, type EnginePaths } from './engine.js';
import { DISK_FULL, fenceDefs, PRELUDE } from './prelude.js';

/**
 * Artifact install. With `url` the node downloads it (curl or wget); without, the controller has
 * uploaded it to "$stage/.artifact" already. Then: verify sha256, unpack (tar.gz / tar / zip),
 * check the binary runs, mark complete. Prints the installed binary's path (parseInstalledBinary).
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
