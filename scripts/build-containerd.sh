#!/usr/bin/env bash
# Builds containerd 2.x (containerd, ctr, the runc shim) and crictl from the
# Go module proxy, and a pause image archive, into OUTDIR once per version.
# Usage: build-containerd.sh OUTDIR
set -euo pipefail
out=$1
root=$(cd "$(dirname "$0")/.." && pwd)
CONTAINERD_VERSION=v2.4.2
CRICTL_VERSION=v1.34.0
# The stamp hashes contents only, so that a clone in another folder (CI)
# finds the cache.
stamp="$out/.built-$CONTAINERD_VERSION-$CRICTL_VERSION-$(cat "$root/test/cmd/pause/main.go" "$root/scripts/build-containerd.sh" | sha256sum | cut -c1-12)"
[ -f "$stamp" ] && exit 0
mkdir -p "$out"
echo "containerd: building containerd $CONTAINERD_VERSION, ctr, shim and crictl $CRICTL_VERSION into $out (a few minutes, once)"
GOBIN="$out" CGO_ENABLED=0 GOFLAGS=-buildvcs=false go install \
  github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION \
  github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION

# crictl cannot be `go install`ed here: build it from a throwaway module
# that requires cri-tools and carries cri-tools' own go.sum.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export GONOSUMDB=sigs.k8s.io/cri-tools
(
  cd "$tmp"
  go mod init crictl-build >/dev/null 2>&1
  src=$(GOFLAGS=-mod=mod go mod download -json sigs.k8s.io/cri-tools@$CRICTL_VERSION | jq -r .Dir)
  cp "$src/go.sum" go.sum && chmod u+w go.sum
  go mod edit -require sigs.k8s.io/cri-tools@$CRICTL_VERSION
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/cri-tools/cmd/crictl"\n' > tools.go
  go mod tidy >/dev/null
  CGO_ENABLED=0 go build -o "$out/crictl" sigs.k8s.io/cri-tools/cmd/crictl
)

# A pause image: a static Go binary in a one-layer OCI archive.
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/rootfs/pause" "$root/test/cmd/pause"
"$root/scripts/oci-archive.sh" "$tmp/rootfs" /pause "netready.test/pause:1" "$out/pause.tar"
touch "$stamp"
