/**
 * Fetch a model file into the node's cache (<data dir>/models/<sha256>.gguf): from a URL or from a
 * file already on the node, verified by sha256. Each script prints the file's size in bytes as its
 * last line (parseModelBytes).
 */
import type { Fence } from '../driver.js';
import { shq } from '../shell.js';
import { DISK_FULL, fenceAct, fenceDefs, PRELUDE } from './prelude.js';
import { lastLine } from './sections.js';

/** Where a model file with this sha256 lives on the node. */
export function modelPath(dataDir: string, sha256: string): string {
  return `${dataDir}/models/${sha256}.gguf`;
}

/**
 * Model from a URL: download to <sha>.gguf.part (resuming a previous part), verify, rename. The URL
 * comes on the script's stdin (modelFromUrlInput), not in its text: the script itself is an argv on
 * the node (`sh -c SCRIPT`), and a presigned URL's query string is a credential. With `tokenSecret`
 * (the secret's name, for messages) a bearer token follows the URL on stdin. curl gets the URL and
 * the token on a pipe as a config (`-K -`), so neither is in any argv another user of the node can
 * read (ps, /proc); curl drops the token on a redirect to another host (Hugging Face redirects to a
 * signed CDN URL). wget gets the URL with `-i -`, and is refused with a token: it sends a header
 * given in its wgetrc on to the host a redirect leads to (seen with wget 1.21.3).
 */
export function modelFromUrlScript(dataDir: string, sha256: string, tokenSecret: string | null = null, fence?: Fence | null): string {
  const sent = tokenSecret === null ? '' : `; sent the bearer token from secret '${tokenSecret}'`;
  const curl = (resume: boolean): string => {
    const args = `-fsSL --retry 2 --connect-timeout 30${resume ? ' -C -' : ''} -o "$part" -K - 2>"$err"`;
    return tokenSecret === null
      ? `printf 'url = "%s"\\n' "$urlq" | curl ${args}`
      : `printf 'header = "Authorization: Bearer %s"\\nurl = "%s"\\n' "$(llmgw_cfgq "$tok")" "$urlq" | curl ${args}`;
  };
  const wget = (resume: boolean): string =>
    tokenSecret === null
      ? `printf '%s\\n' "$url" | wget -q${resume ? ' -c' : ''} -O "$part" -i - 2>"$err"`
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
sent=${shq(sent)}
# a value inside a curl config's double quotes: \\ and " escaped
llmgw_cfgq() { printf '%s' "$1" | sed 's/[\\\\"]/\\\\&/g'; }
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
# the URL: the first line of stdin (never in the script's text, an argv on the node)
IFS= read -r url || [ -n "$url" ] || llmgw_fail MODEL_DOWNLOAD_FAILED 'no source URL on stdin'
urlq=$(llmgw_cfgq "$url")
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
  llmgw_fail MODEL_DOWNLOAD_FAILED "download of $url failed (exit $rc$sent): $why"
fi
rm -f "$err"
got=$(llmgw_sha256 "$part")
if [ "$got" != "$sha" ]; then rm -f "$part"; llmgw_fail MODEL_CHECKSUM_MISMATCH "downloaded file has sha256 $got, the model says $sha"; fi
mv "$part" "$final" || exit 1
stat -c %s "$final" 2>/dev/null || wc -c <"$final"
`;
}

/** What modelFromUrlScript reads on its stdin: the URL, then the token (when the model has one). */
export function modelFromUrlInput(url: string, token: string | null = null): string {
  if (/[\r\n]/.test(url) || (token !== null && /[\r\n]/.test(token))) throw new Error('a source URL or token holds a line break');
  return `${url}\n${token === null ? '' : `${token}\n`}`;
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

/** The size (bytes) a model fetch printed as its last line; 0 when it is not a number. */
export function parseModelBytes(stdout: string): number {
  return Number(lastLine(stdout)) || 0;
}
