#!/usr/bin/env bash
# CI entry point: install what the tests need, then run exactly the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
need=()
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v shellcheck >/dev/null 2>&1 || need+=(shellcheck)
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
# etcdctl: the restore test backs etcd up and restores it (snapshot save / restore)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
# the device tests: Mesa's software Vulkan device (lavapipe) and the Vulkan loader
[ -f /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || need+=(mesa-vulkan-drivers)
ldconfig -p 2>/dev/null | grep -q 'libvulkan\.so\.1' || need+=(libvulkan1)
# the status page's browser test drives Debian's Chromium (playwright-core, no browser download)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)
for tool in git cmake make g++ curl ccache; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "[ci] installing: ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

npm ci --no-audit --no-fund

# The real llama-server the tests run against: built once from node-llama-cpp's bundled
# llama.cpp source and cached by version (about 10 minutes on 2 cores the first time).
scripts/build-llama-server.sh

