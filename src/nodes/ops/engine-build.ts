/** Engine install by the build method: git clone at a ref, cmake, copy the binary and its libraries. */
import { shJoin, shq } from '../shell.js';
import { engineLock, engineLockVars, engineVars, ENGINE_FINISH, type EnginePaths } from './engine.js';
import { DISK_FULL, fenceDefs, int, PRELUDE } from './prelude.js';

/**
 * Build from git (a URL or a bundle path) at ref with cmake: Release, GGML_NATIVE=ON (the node's own
 * CPU flags), an $ORIGIN rpath, the spec's flags; ccache as the compiler launcher when the node has it
 * (with CCACHE_BASEDIR so a rebuild in another directory hits the cache). Copies the target binary and
 * every shared library into the engine dir. Prints the installed binary's path (parseInstalledBinary).
 * With GGML_RPC on in the flags (wantsRpc) it also builds rpc-server (the target is ggml-rpc-server in
 * newer llama.cpp, rpc-server in older) and installs it as rpc-server beside the binary.
 */
export function buildInstallScript(p: EnginePaths & { readonly git: string; readonly ref: string; readonly cmakeFlags: readonly string[]; readonly target: string; readonly jobs: number | null }): string {
  const rpc = wantsRpc(p.cmakeFlags)
    ? `cmake --build "$work/build" --target ggml-rpc-server -j "$jobs" >>"$log" 2>&1 || cmake --build "$work/build" --target rpc-server -j "$jobs" >>"$log" 2>&1 || llmgw_build_fail ENGINE_BUILD_FAILED "GGML_RPC is on but neither ggml-rpc-server nor rpc-server builds"
rb=$(find "$work/build" -type f \\( -name ggml-rpc-server -o -name rpc-server \\) -perm -u+x | head -n 1)
[ -n "$rb" ] || llmgw_build_fail ENGINE_BUILD_FAILED "GGML_RPC is on but the build produced no rpc-server binary"
cp "$rb" "$stage/rpc-server" || llmgw_build_fail NODE_COMMAND_FAILED "copy failed"
`
    : '';
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
${rpc}find "$work/build" -name '*.so*' \\( -type f -o -type l \\) -exec cp -P {} "$stage/" \\; || llmgw_build_fail NODE_COMMAND_FAILED "copying shared libraries failed"
rm -rf "$work"; work=
llmgw_finish "$target"
`;
}

/** Whether cmake flags turn llama.cpp's RPC backend on (-DGGML_RPC=ON, or the older -DLLAMA_RPC=ON). */
export function wantsRpc(cmakeFlags: readonly string[]): boolean {
  return cmakeFlags.some((f) => /^-D(GGML|LLAMA)_RPC(:BOOL)?=(ON|1|TRUE|YES|Y)$/i.test(f.trim()));
}
