#!/usr/bin/env bash
# Builds Prometheus's promtool, pinned by test/monitoring-tools, into a
# cache folder keyed by the pin, once. Service discovery is left out
# (remove_all_sd): promtool's checks of metrics and rules need none, and
# it halves the build.
# Usage: build-promtool.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
stamp="$out/.built-$(sha256sum <"$root/test/monitoring-tools/go.sum" | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "promtool: building Prometheus's promtool into $out (a few minutes, once)"
mkdir -p "$out"
cd "$root/test/monitoring-tools"
CGO_ENABLED=0 go build -tags remove_all_sd -trimpath -o "$out/" github.com/prometheus/prometheus/cmd/promtool
touch "$stamp"
