#!/usr/bin/env bash
# Builds the Kubernetes pieces pinned by test/k8s into OUTDIR, once per pin:
# etcd, kube-apiserver, and for the node tests kubelet,
# kube-controller-manager, kube-scheduler and kubectl; and the older
# cluster's kube-apiserver pinned by test/k8s134 into OUTDIR/1.34. Every
# binary gets its version stamped, or /version breaks clients.
# Usage: build-k8s.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)

# build MODULE DEST CMD... builds each k8s.io/kubernetes/cmd/CMD of the
# module at test/MODULE into DEST, once per pin. The stamp hashes contents
# only, so that a clone in another folder (CI) finds the cache.
build() {
  local mod=$1 dest=$2; shift 2
  local stamp="$dest/.built-$(cat "$root/test/$mod/go.sum" "$root/scripts/build-k8s.sh" | sha256sum | cut -c1-16)"
  [ -f "$stamp" ] && return 0
  mkdir -p "$dest"
  local version major minor ld=""
  version=$(cd "$root/test/$mod" && go list -m -f "{{.Version}}" k8s.io/kubernetes)
  major=$(echo "${version#v}" | cut -d. -f1); minor=$(echo "$version" | cut -d. -f2)
  echo "k8s: building Kubernetes $version ($*) into $dest (once per pin)"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for c in "$@"; do
    local s; s=$(date +%s)
    (cd "$root/test/$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ld" -o "$dest/$c" "k8s.io/kubernetes/cmd/$c")
    echo "k8s: built $c $version in $(( $(date +%s) - s )) s"
  done
  touch "$stamp"
}

etcd_stamp="$out/.built-etcd-$(cat "$root/test/k8s/go.sum" | sha256sum | cut -c1-16)"
if [ ! -f "$etcd_stamp" ]; then
  mkdir -p "$out"
  (cd "$root/test/k8s" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
  touch "$etcd_stamp"
fi
build k8s "$out" kube-apiserver kubelet kube-controller-manager kube-scheduler kubectl
build k8s134 "$out/1.34" kube-apiserver
