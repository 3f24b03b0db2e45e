#!/usr/bin/env bash
# make demo: a real pod netns whose CNI ADD waits until its network is
# programmed, then its marker and STATUS. Needs root; cleans up after itself.
# Env: BIN (netready binaries), CNI_BIN (reference plugins and cnitool).
set -euo pipefail
: "${BIN:?}" "${CNI_BIN:?}"
root=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "demo: needs root (network namespaces)"; exit 1; }

id=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
net=nr-demo-$id; br=nr$id; ns=nrdemo-$id
subnet=10.200.250.0/24; gw=10.200.250.1
work=$(mktemp -d /tmp/netready-demo.XXXXXX)
mkdir -p "$work/conf" "$work/bin"
cp "$CNI_BIN"/* "$BIN/netready" "$work/bin/"
export NETCONFPATH=$work/conf CNI_PATH=$work/bin
fw4=$(sysctl -n net.ipv4.ip_forward); fw6=$(sysctl -n net.ipv6.conf.all.forwarding)
guard=(FORWARD -s $subnet ! -d $subnet -j DROP)
had_cache=0; [ -e /var/lib/cni ] && had_cache=1

cleanup() {
  set +e
  [ -n "${agent:-}" ] && kill "$agent" 2>/dev/null
  "$work/bin/cnitool" del "$net" /var/run/netns/$ns >/dev/null 2>&1
  ip netns del "$ns" 2>/dev/null
  ip link del "$br" 2>/dev/null
  iptables -w 5 -D "${guard[@]}" 2>/dev/null
  sysctl -qw net.ipv4.ip_forward="$fw4" net.ipv6.conf.all.forwarding="$fw6"
  [ $had_cache = 0 ] && rm -rf /var/lib/cni
  rm -rf "$work"
}
trap cleanup EXIT

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
ts() { date +%H:%M:%S.%3N; }

# conflists/bridge.conflist with demo names, and a bridge that carries no
# gateway address: like a network plugin that returns from ADD before its
# agent has programmed the host route.
jq --arg net "$net" --arg br "$br" --arg sub "$subnet" --arg work "$work" '
  .name = $net
  | .plugins[0].bridge = $br | .plugins[0].isGateway = false
  | .plugins[0].ipam.ranges = [[{subnet: $sub}]] | .plugins[0].ipam.dataDir = ($work + "/ipam")
  | .plugins[1].stateDir = ($work + "/state") | .plugins[1].logFile = ($work + "/netready.log")
  | .plugins[1].timeout = "15s"
  | .plugins[1].status = {agents: [{kind: "file", path: ($work + "/agent-heartbeat"), maxAge: "30s"}], failAfter: "3s"}' \
  "$root/conflists/bridge.conflist" > "$work/conf/$net.conflist"
touch "$work/agent-heartbeat"   # the stand-in agent is alive

iptables -w 5 -I "${guard[@]}"
ip netns add "$ns"

say "conflist ($work/conf/$net.conflist): bridge + host-local, then netready last"
jq -c '.plugins[]' "$work/conf/$net.conflist"

say "a stand-in agent will program the host route 2 s from now"
( sleep 2; echo "[$(ts)] agent: adding $gw/24 to $br (host route to the pod subnet appears)"
  ip addr add $gw/24 dev "$br" ) &
agent=$!

say "[$(ts)] cnitool add $net (ADD blocks until the route and gateway are there)"
start=$(date +%s%N)
"$work/bin/cnitool" add "$net" /var/run/netns/$ns | jq -c '{ips: [.ips[].address]}'
end=$(date +%s%N)
echo "[$(ts)] ADD returned after $(( (end - start) / 1000000 )) ms"
wait "$agent"; agent=

cid=cnitool-$(printf '%s' /var/run/netns/$ns | sha512sum | cut -c1-20)
marker=$work/state/$net/${cid}_eth0.json
say "marker $marker"
cat "$marker"

say "cnitool check $net"
"$work/bin/cnitool" check "$net" /var/run/netns/$ns && echo "CHECK ok: marker matches and address/route hold"

say "cnitool status $net"
"$work/bin/cnitool" status "$net" /var/run/netns/$ns && echo "STATUS ok: this host can take ADDs"

say "the agent dies (its heartbeat file goes): a blip shorter than failAfter (3s here, 30s by default) leaves STATUS green"
rm "$work/agent-heartbeat"
"$work/bin/cnitool" status "$net" /var/run/netns/$ns && echo "STATUS ok: the agent has failed for less than failAfter"
sleep 3
say "still dead after failAfter: STATUS tells the runtime, and for how long"
"$work/bin/cnitool" status "$net" /var/run/netns/$ns 2>&1 | grep -m1 . || true
echo "(containerd would now report NetworkReady=false with this message)"
touch "$work/agent-heartbeat"
"$work/bin/cnitool" status "$net" /var/run/netns/$ns && echo "agent back: STATUS ok again"

say "cnitool del $net"
"$work/bin/cnitool" del "$net" /var/run/netns/$ns
[ -e "$marker" ] && { echo "marker still there!"; exit 1; } || echo "marker removed"

say "netready log"
cat "$work/netready.log"
