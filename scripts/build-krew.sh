#!/usr/bin/env bash
# Builds krew, pinned by test/krew-tools, into a cache folder keyed by the
# pin and this script, once. The release tests install kubectl-netready
# with it from the release's own manifest and archive, as README says.
# Usage: build-krew.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
stamp="$out/.built-$(cat "$root/test/krew-tools/go.sum" "$0" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "krew: building krew into $out"
mkdir -p "$out"
cd "$root/test/krew-tools"
CGO_ENABLED=0 go build -trimpath -o "$out/" sigs.k8s.io/krew/cmd/krew
rm -f "$out"/.built-*
touch "$stamp"
