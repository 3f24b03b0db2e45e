#!/usr/bin/env bash
# Builds the real Cilium pinned by test/cilium into OUTDIR, once per pin:
# cilium-agent, cilium-cni and cilium-dbg, the agent's BPF sources (it
# compiles them at start with clang-19, which scripts/deps.sh installs)
# and Cilium's CRDs for the test's API server.
# Usage: build-cilium.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
stamp="$out/.built-$(cat "$root/test/cilium/go.sum" "$root/scripts/build-cilium.sh" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
mkdir -p "$out"
cd "$root/test/cilium"
version=$(go list -m -f "{{.Version}}" github.com/cilium/cilium)
# {{.Dir}} is empty until the module is in the module cache (a cold CI).
go mod download github.com/cilium/cilium
src=$(go list -m -f "{{.Dir}}" github.com/cilium/cilium)
[ -d "$src/bpf" ] || { echo "cilium: no bpf/ in the module at '$src'" >&2; exit 1; }
echo "cilium: building Cilium $version (agent, cni, dbg) into $out (about 5 min cold, once)"
for c in daemon:cilium-agent plugins/cilium-cni:cilium-cni cilium-dbg:cilium-dbg; do
  s=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/${c#*:}" "github.com/cilium/cilium/${c%%:*}"
  echo "cilium: built ${c#*:} in $(( $(date +%s) - s )) s"
done
rm -rf "$out/bpf" "$out/crds"
cp -r "$src/bpf" "$out/bpf"
chmod -R u+w "$out/bpf"
mkdir -p "$out/crds"
cp "$src"/pkg/k8s/apis/cilium.io/client/crds/v2/*.yaml "$src"/pkg/k8s/apis/cilium.io/client/crds/v2alpha1/*.yaml "$out/crds/"
touch "$stamp"
