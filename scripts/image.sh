#!/usr/bin/env bash
# Builds netready's OCI image without a Docker daemon or a registry: the three
# static binaries on an empty (scratch) base, plus Debian's iptables-nft for
# the sidecar's re-checks of pending iptables checks, one layer, as an OCI
# archive that `ctr images import` accepts.
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
# iptables-nft as this Debian build host has it (scripts/deps.sh installs
# it): the binary, its shared libraries and loader, and the xtables match
# modules that `iptables -S` loads to print rules.
nft_multi=$(readlink -f "$(command -v iptables)")
case "$nft_multi" in
  *xtables-nft-multi) ;;
  *) echo "image: iptables here is $nft_multi, not the nf_tables backend (xtables-nft-multi)" >&2; exit 1 ;;
esac
copy_with_libs() { # file...: copy each file and the shared libraries it needs, keeping paths
  local f lib
  for f in "$@"; do
    install -D "$f" "$work/rootfs$f"
    for lib in $(ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
      [ -e "$work/rootfs$lib" ] || install -D "$lib" "$work/rootfs$lib"
    done
  done
}
# The real path: on merged-/usr hosts /lib is a link, and libxtables looks
# in /usr/lib/<triplet>/xtables.
modules=$(readlink -f "$(dirname "$(ldd "$nft_multi" | awk '/libxtables/ {print $3}')")/xtables")
copy_with_libs "$nft_multi" "$modules"/*.so
mkdir -p "$work/rootfs/usr/sbin"
for name in iptables ip6tables iptables-save ip6tables-save; do
  ln -sf "$(basename "$nft_multi")" "$work/rootfs/usr/sbin/$name"
done
[ "$(dirname "$nft_multi")" = /usr/sbin ] || ln -sf "$nft_multi" "$work/rootfs/usr/sbin/$(basename "$nft_multi")"

"$root/scripts/oci-archive.sh" "$work/rootfs" /bin/netready-sidecar "ghcr.io/netready/netready:$version" "$out"
echo "image: ghcr.io/netready/netready:$version -> $out ($(du -h "$out" | cut -f1))"
