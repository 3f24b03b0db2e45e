#!/usr/bin/env bash
# Builds the real CNI reference plugins and cnitool pinned by test/tools
# into a cache folder keyed by the pinned versions, once.
# Usage: build-tools.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
stamp="$out/.built-$(cat "$root/test/tools/go.sum" "$root/scripts/build-tools.sh" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "tools: building CNI reference plugins and cnitool into $out"
mkdir -p "$out"
cd "$root/test/tools"
CGO_ENABLED=0 go build -trimpath -o "$out/" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/main/ptp \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/meta/portmap \
  github.com/containernetworking/plugins/plugins/meta/bandwidth \
  github.com/containernetworking/plugins/plugins/meta/firewall \
  github.com/containernetworking/plugins/plugins/meta/tuning \
  github.com/containernetworking/cni/cnitool
touch "$stamp"
