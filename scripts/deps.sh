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

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "deps: missing ${need[*]} and not root: install them with apt-get" >&2
    exit 1
  fi
  echo "deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
for c in ip iptables ip6tables nft jq runc file; do
  command -v "$c" >/dev/null || { echo "deps: $c is still missing" >&2; exit 1; }
done
