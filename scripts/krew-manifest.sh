#!/usr/bin/env bash
# Writes the krew plugin manifest of a release to stdout: one platform per
# kubectl-netready archive in OUT, with its sha256.
# Usage: krew-manifest.sh VERSION OUT PLATFORM...
set -euo pipefail
version=$1 out=$2
shift 2
base=https://github.com/netready/netready/releases/download/$version
cat <<HEAD
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: netready
spec:
  version: $version
  homepage: https://github.com/netready/netready
  shortDescription: Why a pod is, or is not, network-ready
  description: |
    Reads netready's pod condition and node state from the API: explain
    tells why a pod is, or is not, network-ready (its networks, the checks
    it waits for, the node's pool and taint); status prints one line per
    node. netready holds CNI ADD until a pod's network is programmed.
  platforms:
HEAD
for p in "$@"; do
  os=${p%/*} arch=${p#*/} ext=
  [ "$os" = windows ] && ext=.exe
  archive=kubectl-netready-$version-$os-$arch.tar.gz
  [ -f "$out/$archive" ] || { echo "krew-manifest: $out/$archive is missing" >&2; exit 1; }
  sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
  cat <<PLATFORM
  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $base/$archive
    sha256: $sum
    bin: kubectl-netready$ext
    files:
      - from: kubectl-netready$ext
        to: .
      - from: LICENSE
        to: .
PLATFORM
done
