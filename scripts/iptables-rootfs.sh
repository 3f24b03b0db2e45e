#!/usr/bin/env bash
# Puts Debian's iptables-nft of one architecture into an image root: the
# multi-call binary, the xtables match modules `iptables -S` loads, every
# shared library they need and the loader. The packages come from this
# host's Debian sources through a private apt configuration, so the host's
# dpkg architectures and package state are never touched.
# Usage: iptables-rootfs.sh ARCH ROOTFS CACHE
set -euo pipefail
arch=$1 rootfs=$2 cache=$3
die() { echo "iptables-rootfs: $*" >&2; exit 1; }
apt_dir="$cache/apt-$arch"
mkdir -p "$apt_dir/state/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
touch "$apt_dir/status"
cat > "$apt_dir/apt.conf" <<CONF
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Sandbox::User "root";
Dir::State "$apt_dir/state";
Dir::State::status "$apt_dir/status";
Dir::Cache "$apt_dir/cache";
Dir::Etc::SourceList "/etc/apt/sources.list";
Dir::Etc::SourceParts "/etc/apt/sources.list.d";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
CONF
pkgs=(iptables libip4tc2 libip6tc2 libxtables12 libnftnl11 libmnl0 libnetfilter-conntrack3 libnfnetlink0 libc6)
export APT_CONFIG="$apt_dir/apt.conf"
apt-get -qq update || die "apt-get update for $arch failed"
(cd "$apt_dir/debs" && rm -f ./*.deb && apt-get -qq download "${pkgs[@]}") || die "downloading ${pkgs[*]} for $arch failed"
stage="$apt_dir/root"
rm -rf "$stage" && mkdir -p "$stage"
for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$stage"; done

multi=$(cd "$stage" && ls usr/sbin/xtables-nft-multi) || die "no xtables-nft-multi in iptables for $arch"
modules=$(cd "$stage" && ls -d usr/lib/*/xtables) || die "no xtables modules for $arch"
libdirs=$(cd "$stage" && ls -d lib/*-linux-gnu usr/lib/*-linux-gnu 2>/dev/null)
# copy FILE (relative to the stage) and, recursively, the libraries it needs.
copy() {
  local f=$1 lib dir found
  [ -e "$rootfs/$f" ] && return 0
  install -D "$stage/$f" "$rootfs/$f"
  for lib in $(readelf -d "$stage/$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    found=
    for dir in $libdirs; do
      if [ -e "$stage/$dir/$lib" ]; then found="$dir/$(basename "$(readlink -f "$stage/$dir/$lib")")"; break; fi
    done
    [ -n "$found" ] || die "$f needs $lib, which no downloaded package has"
    copy "$found"
    [ -e "$rootfs/$dir/$lib" ] || ln -s "$(basename "$found")" "$rootfs/$dir/$lib"
  done
}
copy "$multi"
for m in "$stage/$modules"/*.so; do copy "$modules/$(basename "$m")"; done
interp=$(readelf -l "$stage/$multi" | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
[ -n "$interp" ] || die "no program interpreter in xtables-nft-multi"
# The loader, where the binary asks for it; its package may ship that path
# as a link, absolute within the package's root.
real=${interp#/}
while [ -L "$stage/$real" ]; do
  target=$(readlink "$stage/$real")
  case $target in /*) real=${target#/} ;; *) real=$(dirname "$real")/$target ;; esac
done
install -D "$stage/$real" "$rootfs$interp"
mkdir -p "$rootfs/usr/sbin"
for name in iptables ip6tables iptables-save ip6tables-save; do
  ln -sf xtables-nft-multi "$rootfs/usr/sbin/$name"
done
