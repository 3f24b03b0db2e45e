#!/usr/bin/env bash
# Builds the Kubernetes pieces pinned by test/k8s into OUTDIR, once per pin:
# etcd, kube-apiserver, and for the node tests kubelet,
# kube-controller-manager, kube-scheduler and kubectl. Every binary gets its
# version stamped, or /version breaks clients.
# Usage: build-k8s.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
# The stamp hashes contents only, so that a clone in another folder (CI)
# finds the cache.
stamp="$out/.built-$(cat "$root/test/k8s/go.sum" "$root/scripts/build-k8s.sh" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
mkdir -p "$out"
version=$(cd "$root/test/k8s" && go list -m -f "{{.Version}}" k8s.io/kubernetes)
major=$(echo "${version#v}" | cut -d. -f1); minor=$(echo "$version" | cut -d. -f2)
echo "k8s: building etcd and Kubernetes $version (apiserver, kubelet, controller-manager, scheduler, kubectl) into $out (about 10 min cold, once)"
ld=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
cd "$root/test/k8s"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3
for c in kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl; do
  s=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ld" -o "$out/$c" "k8s.io/kubernetes/cmd/$c"
  echo "k8s: built $c in $(( $(date +%s) - s )) s"
done
touch "$stamp"
