#!/usr/bin/env bash
# Builds Helm, pinned by test/helm-tools, into a cache folder keyed by the
# pin and this script, once. The chart's tests run it: lint, template,
# and install, upgrade, rollback and uninstall against a real API server.
# The flags are Helm's own Makefile's: its version, and the Kubernetes
# version `helm template` and `helm lint` assume (its client-go's minor,
# as 1.x), which Helm leaves at 1.20 otherwise.
# Usage: build-helm.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
stamp="$out/.built-$(cat "$root/test/helm-tools/go.sum" "$0" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "helm: building Helm into $out (a few minutes, once)"
mkdir -p "$out"
cd "$root/test/helm-tools"
helm=$(go list -f '{{.Version}}' -m helm.sh/helm/v3)
k8s=$(go list -f '{{.Version}}' -m k8s.io/client-go) # v0.37.0 is Kubernetes 1.37
minor=$(echo "$k8s" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm"
for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
  ldflags="$ldflags -X $p.k8sVersionMajor=1 -X $p.k8sVersionMinor=$minor"
done
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/" helm.sh/helm/v3/cmd/helm
rm -f "$out"/.built-*
touch "$stamp"
