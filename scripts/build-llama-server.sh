#!/usr/bin/env bash
# Builds llama.cpp's llama-server from the source that node-llama-cpp ships as a git bundle
# (llama/gitRelease.bundle) and caches it by version, laid out like llama.cpp's release
# archives: bin/llama-server with its shared libraries beside it and an $ORIGIN rpath.
# Built with GGML_RPC=ON: rpc-server sits beside llama-server (llama-server --rpc host:port uses it).
# A cache without rpc-server (built before RPC) is rebuilt, incrementally in the same build dir.
#
#   scripts/build-llama-server.sh            # prints the cached directory, building if needed
#
# Env: LLMGW_CACHE_DIR (default ~/.cache/llmgw), NODE_LLAMA_CPP_VERSION (default 3.21.1),
#      LLMGW_BUILD_JOBS (default: nproc).
set -euo pipefail
version="${NODE_LLAMA_CPP_VERSION:-3.21.1}"
cache="${LLMGW_CACHE_DIR:-$HOME/.cache/llmgw}"
out="$cache/llama-server/node-llama-cpp-$version"
jobs="${LLMGW_BUILD_JOBS:-$(nproc)}"

cached() { [ -x "$out/llama-server" ] && [ -x "$out/rpc-server" ] && [ -f "$out/.complete" ]; }
if cached; then
  echo "$out"
  exit 0
fi

# One build at a time per cache: a second caller waits, then finds the cache filled.
mkdir -p "$cache"
if command -v flock >/dev/null && [ -z "${LLMGW_BUILD_LOCKED:-}" ]; then
  exec 9>"$cache/.build-llama-server.lock"
  flock 9
  export LLMGW_BUILD_LOCKED=1
  if cached; then echo "$out"; exit 0; fi
fi

for tool in git cmake make g++ npm tar; do
  command -v "$tool" >/dev/null || { echo "build-llama-server: '$tool' is required but not installed" >&2; exit 1; }
done

work="$cache/build/node-llama-cpp-$version"
mkdir -p "$work" "$cache/llama-server"
log() { echo "[build-llama-server] $*" >&2; }

if [ ! -f "$work/gitRelease.bundle" ]; then
  log "fetching node-llama-cpp@$version (npm pack, no install scripts)"
  (cd "$work" && npm pack "node-llama-cpp@$version" --silent >/dev/null)
  tar -xzf "$work/node-llama-cpp-$version.tgz" -C "$work" package/llama/gitRelease.bundle
  mv "$work/package/llama/gitRelease.bundle" "$work/gitRelease.bundle"
  rm -rf "$work/package" "$work/node-llama-cpp-$version.tgz"
fi

if [ ! -d "$work/src/.git" ]; then
  log "cloning the llama.cpp bundle"
  rm -rf "$work/src"
  git clone --quiet "$work/gitRelease.bundle" "$work/src"
fi

log "configuring (cmake)"
cmake -S "$work/src" -B "$work/src/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_RPC=ON \
  -DCMAKE_BUILD_RPATH='$ORIGIN' -DCMAKE_INSTALL_RPATH='$ORIGIN' >"$work/cmake.log" 2>&1 \
  || { tail -30 "$work/cmake.log" >&2; exit 1; }
log "building llama-server and rpc-server with $jobs jobs (about 10 minutes on 2 cores; minutes when incremental)"
cmake --build "$work/src/build" --target llama-server ggml-rpc-server -j "$jobs" >"$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log" >&2; exit 1; }

tmp="$out.tmp.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
cp "$work/src/build/bin/llama-server" "$tmp/"
# this llama.cpp names the target and binary ggml-rpc-server; cached under the name its docs use
cp "$work/src/build/bin/ggml-rpc-server" "$tmp/rpc-server"
find "$work/src/build" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$tmp/" \;
"$tmp/llama-server" --version >"$tmp/VERSION" 2>&1 || { cat "$tmp/VERSION" >&2; exit 1; }
"$tmp/llama-server" --help 2>&1 | grep -q -- '--rpc' \
  || { echo "build-llama-server: llama-server was built without RPC (no --rpc in --help)" >&2; exit 1; }
"$tmp/rpc-server" --help >/dev/null 2>&1 \
  || { echo "build-llama-server: rpc-server --help failed" >&2; exit 1; }
touch "$tmp/.complete"
# Swap: the old dir moves aside and the new one takes its name (two renames, no copy), so tests
# that run from the cache while this rebuilds see one or the other; running processes keep their files.
old="$out.old.$$"
if [ -e "$out" ]; then mv "$out" "$old"; fi
mv "$tmp" "$out"
rm -rf "$old"
log "cached at $out"
echo "$out"
