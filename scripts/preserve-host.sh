#!/usr/bin/env bash
# Runs a command, then puts back what it may have left on the host even when
# it died half-way (a Go panic skips every t.Cleanup and TestMain's own
# restore): forwarding sysctls, cnitool's /var/lib/cni cache, and netns,
# links and FORWARD guard rules that appeared during the run with the test
# prefixes (netns cnitest-*, links nr<hex>, rules on 10.200.0.0/16, the
# test agent's chains NR-<hex> and nftables tables nr<hex>).
set -uo pipefail
# One run at a time. A run that starts while another run's bridge has
# switched forwarding on would save "on" and put it back at its end. The
# lock is on this script itself, so nothing is left behind.
exec 9<"$0"
flock -w 3600 9 || { echo "preserve-host: another run has held the lock for an hour" >&2; exit 1; }
sysctls=(net.ipv4.ip_forward net.ipv6.conf.all.forwarding net.ipv6.conf.default.forwarding)
declare -A saved
for s in "${sysctls[@]}"; do saved[$s]=$(sysctl -n "$s"); done
had_cache=0; [ -e /var/lib/cni ] && had_cache=1
# containerd 2.x puts shim sockets in /run/containerd/s whatever its state dir.
had_run_containerd=0; [ -e /run/containerd ] && had_run_containerd=1
netns_before=$(ip netns list 2>/dev/null | awk '{print $1}')
links_before=$(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1)
rules_before=$(iptables -w 5 -S FORWARD 2>/dev/null)
# The node tests (test/integration/node): kubelet changes these sysctls and
# hard-codes /var/lib/kubelet and /var/log/containers.
node_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops)
declare -A node_saved
for s in "${node_sysctls[@]}"; do node_saved[$s]=$(sysctl -n "$s"); done
had_kubelet_dir=0; [ -e /var/lib/kubelet ] && had_kubelet_dir=1
had_container_logs=0; [ -e /var/log/containers ] && had_container_logs=1
tables_before=$(nft list tables 2>/dev/null)

# cleanup_node undoes what a node test that died half-way left: its
# processes (all run from or under /run/nr-node), mounts, folder, bridge,
# guard rules, cgroups, kubelet's host folders and sysctls.
cleanup_node() {
  local root=/run/nr-node
  if [ -e $root ]; then
    for p in $(pgrep -f "$root/" 2>/dev/null); do
      echo "preserve-host: stopping leftover node process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-60))"
      kill -KILL "$p" 2>/dev/null
    done
    awk -v d="$root" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m"; echo "preserve-host: unmounted $m"
    done
    rm -rf $root && echo "preserve-host: removed $root"
  fi
  for l in $(ip -o link show master nrnode0 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do ip link del "$l"; done
  ip link show nrnode0 >/dev/null 2>&1 && ip link del nrnode0 && echo "preserve-host: removed bridge nrnode0"
  iptables -w 5 -S FORWARD 2>/dev/null | grep -- '--comment nr-node-guard' | while read -r rule; do
    eval "iptables -w 5 ${rule/-A /-D }"; echo "preserve-host: removed node guard rule"
  done
  for h in /sys/fs/cgroup/*/nr-node-kubelet; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$h" ] && echo "preserve-host: could not remove cgroup $h" || echo "preserve-host: removed cgroup $h"
  done
  for s in "${node_sysctls[@]}"; do [ "$(sysctl -n "$s")" = "${node_saved[$s]}" ] || sysctl -qw "$s=${node_saved[$s]}"; done
  [ $had_kubelet_dir = 0 ] && [ -e /var/lib/kubelet ] && rm -rf /var/lib/kubelet && echo "preserve-host: removed /var/lib/kubelet"
  [ $had_container_logs = 0 ] && [ -e /var/log/containers ] && rm -rf /var/log/containers && echo "preserve-host: removed /var/log/containers"
  return 0
}

# cleanup_crio undoes what a CRI-O test that died half-way left: the
# processes of its pods' cgroup and those run from /run/nr-crio (conmon),
# mounts, the folder, cgroups, and its entries in libcni's cache.
cleanup_crio() {
  local root=/run/nr-crio
  for h in /sys/fs/cgroup/*/nr-crio /sys/fs/cgroup/nr-crio; do
    [ -d "$h" ] || continue
    find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do
      echo "preserve-host: stopping leftover CRI-O pod process $p"; kill -KILL "$p" 2>/dev/null
    done
  done
  if [ -e $root ]; then
    for p in $(pgrep -f "$root/" 2>/dev/null); do
      echo "preserve-host: stopping leftover CRI-O process $p ($(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-60))"
      kill -KILL "$p" 2>/dev/null
    done
    sleep 0.2
    awk -v d="$root" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m"; echo "preserve-host: unmounted $m"
    done
    rm -rf $root && echo "preserve-host: removed $root"
  fi
  for h in /sys/fs/cgroup/*/nr-crio /sys/fs/cgroup/nr-crio; do
    [ -d "$h" ] || continue
    find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$h" ] && echo "preserve-host: could not remove cgroup $h" || echo "preserve-host: removed cgroup $h"
  done
  return 0
}

restore() {
  rc=$?
  cleanup_node
  cleanup_crio
  for s in "${sysctls[@]}"; do sysctl -qw "$s=${saved[$s]}"; done
  [ $had_cache = 0 ] && rm -rf /var/lib/cni
  [ $had_run_containerd = 0 ] && ! pgrep -x containerd >/dev/null && rm -rf /run/containerd
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^(cnitest-|nr)'); do
    grep -qx "$ns" <<<"$netns_before" || { echo "preserve-host: removing leftover netns $ns"; ip netns del "$ns"; }
  done
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^nr[0-9a-f]{6}$'); do
    grep -qx "$l" <<<"$links_before" || { echo "preserve-host: removing leftover link $l"; ip link del "$l"; }
  done
  iptables -w 5 -S FORWARD 2>/dev/null | grep -- '-s 10\.200\.' | while read -r rule; do
    grep -qxF -- "$rule" <<<"$rules_before" && continue
    echo "preserve-host: removing leftover rule $rule"
    eval "iptables -w 5 ${rule/-A /-D }"
  done
  for ipt in iptables ip6tables; do
    for c in $($ipt -w 5 -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^NR-[0-9a-f]{6}$/ {print $2}'); do
      echo "preserve-host: removing leftover $ipt chain $c"; $ipt -w 5 -F "$c"; $ipt -w 5 -X "$c"
    done
  done
  for t in $(nft list tables 2>/dev/null | awk '$2 == "inet" && $3 ~ /^nr[0-9a-f]{6}$/ {print $3}'); do
    echo "preserve-host: removing leftover nftables table inet $t"; nft delete table inet "$t"
  done
  # iptables-nft creates "table ip filter" (and ip6) on first use; drop
  # such a table if it appeared during the run and holds no rule.
  nft list tables 2>/dev/null | while read -r _ fam name; do
    grep -qx "table $fam $name" <<<"$tables_before" && continue
    rules=$(nft -a list table "$fam" "$name" 2>/dev/null | grep '# handle' | grep -cvE '^\s*(table|chain|set|map) ')
    if [ "$rules" = 0 ]; then
      nft delete table "$fam" "$name" && echo "preserve-host: removed empty nftables table $fam $name"
    fi
  done
  exit $rc
}
trap restore EXIT
"$@"
