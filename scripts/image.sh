#!/usr/bin/env bash
# Builds netready's OCI image without a Docker daemon or a registry: the three
# static binaries on an empty (scratch) base, one layer, as an OCI archive
# that `ctr images import` accepts.
# Usage: image.sh BINDIR VERSION OUT.tar
set -euo pipefail
bin=$1 version=$2 out=$3
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp"
chmod 1777 "$work/rootfs/tmp"
for b in netready netready-install netready-sidecar; do
  # Static: the base has no libc.
  if command -v file >/dev/null && ! file "$bin/$b" | grep -q "statically linked"; then
    echo "image: $bin/$b is not statically linked" >&2; exit 1
  fi
  install -m 0755 "$bin/$b" "$work/rootfs/bin/$b"
done
"$root/scripts/oci-archive.sh" "$work/rootfs" /bin/netready-sidecar "ghcr.io/netready/netready:$version" "$out"
echo "image: ghcr.io/netready/netready:$version -> $out ($(du -h "$out" | cut -f1))"
