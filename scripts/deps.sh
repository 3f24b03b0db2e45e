#!/usr/bin/env bash
# Installs the Debian packages the tests and the demo need, if missing.
# Fails loudly when something cannot be installed.
set -euo pipefail

need=()
command -v ip >/dev/null       || need+=(iproute2)
command -v iptables >/dev/null || need+=(iptables)
command -v nft >/dev/null      || need+=(nftables)
command -v jq >/dev/null       || need+=(jq)
command -v runc >/dev/null     || need+=(runc)
command -v file >/dev/null     || need+=(file)
# CRI-O's build (cgo, seccomp) and its container monitor.
command -v conmon >/dev/null   || need+=(conmon)
dpkg -s libseccomp-dev >/dev/null 2>&1 || need+=(libseccomp-dev)
command -v gcc >/dev/null      || need+=(gcc libc6-dev)
command -v make >/dev/null     || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
# The release's image root: iptables' libraries, found with readelf.
command -v readelf >/dev/null  || need+=(binutils)

# ovsdb-server for the ovn-kubernetes preset's tests. Installing the
# package must not start Open vSwitch on the host: policy-rc.d (exit 101)
# forbids service starts for the duration.
command -v ovsdb-server >/dev/null || need+=(openvswitch-switch)
# A real OVN control plane for the ovn-kubernetes preset's agent test:
# ovn-northd and the NB/SB schemas, and ovn-controller.
command -v ovn-northd >/dev/null     || need+=(ovn-central)
command -v ovn-controller >/dev/null || need+=(ovn-host)
# The real Cilium agent's test: the agent compiles its BPF at start with
# clang and llc, at the LLVM of Cilium's own images (19).
command -v clang-19 >/dev/null || need+=(clang-19)
command -v llc-19 >/dev/null   || need+=(llvm-19)

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${need[*]} and not root: install them with apt-get" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  apt-get update -qq
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
  fi
  rc=0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || rc=$?
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || exit $rc
fi
for c in ip iptables ip6tables nft jq runc file ovsdb-server ovsdb-tool ovs-vsctl ovs-vswitchd ovn-northd ovn-controller ovn-nbctl clang-19 llc-19 conmon gcc make pkg-config; do
  command -v "$c" >/dev/null || { echo "deps: $c is still missing" >&2; exit 1; }
done
