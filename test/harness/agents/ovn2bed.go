//go:build integration

package agents

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// CrossNodeBed is the race of issue #52 on a TwoNodeOVN: a server pod on
// node B behind an allow-list, as ovn-kubernetes renders an ingress
// NetworkPolicy (the server's port in port group nr_server, an
// allow-related ACL for the address set nr_clients, a drop for the rest),
// and client pods on node A through a CNI chain: the stand-in for
// ovn-k8s-cni-overlay, whose hook does ovnkube's part, then netready.
type CrossNodeBed struct {
	t        testing.TB
	OVN      *TwoNodeOVN
	CNI      *libcni.CNIConfig
	State    string // netready's stateDir
	Log      string // netready's logFile
	ServerIP string
	ServerNS string // the server pod's netns path
	Network  string
}

// StartCrossNodeBed starts the two nodes and the server on B, listening on
// port 8080; subnet is a /24 and serverIP in it.
func StartCrossNodeBed(t testing.TB, subnet, serverIP string) *CrossNodeBed {
	t.Helper()
	ovn := StartTwoNodeOVN(t, subnet)
	cnitest.GuardForwarding(t, subnet)
	dir := t.TempDir()
	b := &CrossNodeBed{t: t, OVN: ovn, State: filepath.Join(dir, "state"), Log: filepath.Join(dir, "netready.log"), ServerIP: serverIP, Network: "ovn-xn"}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"netready-standin": "ovn-k8s-cni-overlay", "netready": "netready"} {
		data, err := os.ReadFile(filepath.Join(harness.BinDir, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bin, to), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// ovnkube's part for a client on node A: its logical switch port and
	// its IP in the policy's address set in one NB transaction (a deny-*
	// pod is left out of the set), then its host veth on A's br-int.
	hook := filepath.Join(dir, "ovnkube-node.sh")
	script := fmt.Sprintf(`#!/bin/sh
exec >>%[5]s 2>&1
set -e
port="${K8S_POD_NAMESPACE}_${K8S_POD_NAME}"
case "$K8S_POD_NAME" in
deny-*) ovn-nbctl --db=unix:%[1]s --timeout=10 lsp-add %[2]s "$port" -- lsp-set-addresses "$port" "$POD_MAC $POD_IP" ;;
*) ovn-nbctl --db=unix:%[1]s --timeout=10 lsp-add %[2]s "$port" -- lsp-set-addresses "$port" "$POD_MAC $POD_IP" \
     -- add Address_Set nr_clients addresses "\"$POD_IP\"" ;;
esac
ip link set "$HOST_VETH" netns %[3]s
ip -n %[3]s link set "$HOST_VETH" up
ovs-vsctl --db=unix:%[4]s --timeout=10 --no-wait add-port br-int "$HOST_VETH" -- set Interface "$HOST_VETH" \
  external_ids:iface-id="$port" external_ids:attached_mac="$POD_MAC" external_ids:sandbox="$CNI_CONTAINERID"
`, ovn.NB, ovn.Switch, ovn.A.NS, ovn.A.Conf, filepath.Join(dir, "hook.log"))
	settings := fmt.Sprintf(`{"subnet": %q, "hook": %q, "txChecksumOff": true}`, subnet, hook)
	if err := os.WriteFile(hook, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "ovn-k8s-cni-overlay.standin.json"), []byte(settings), 0o644); err != nil {
		t.Fatal(err)
	}
	b.CNI = libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)

	ovn.Nbctl("create", "Address_Set", "name=nr_clients")
	srv := ovn.B.AddPod("default_server", serverIP, "--", "pg-add", "nr_server", "default_server")
	ovn.Nbctl("--type=port-group", "acl-add", "nr_server", "to-lport", "1000", `outport == @nr_server && ip4.src == $nr_clients && tcp.dst == 8080`, "allow-related")
	ovn.Nbctl("--type=port-group", "acl-add", "nr_server", "to-lport", "900", `outport == @nr_server && ip4`, "drop")
	// Both chassis have rendered the policy.
	ovn.Nbctl("--wait=hv", "sync")
	cnitest.ServeTCP(t, srv, 8080)
	b.ServerNS = srv
	return b
}

// Chain is the conflist: the stand-in, then netready with today's
// ovn-kubernetes preset on node A's database, and crossNode when it is not
// nil.
func (b *CrossNodeBed) Chain(crossNode map[string]any) *libcni.NetworkConfigList {
	b.t.Helper()
	if crossNode == nil {
		return b.ChainWith(nil)
	}
	return b.ChainWith(map[string]any{"crossNode": crossNode})
}

// ChainWith is Chain with keys set on netready's entry (onTimeout fail
// and timeout 10s unless keys say otherwise).
func (b *CrossNodeBed) ChainWith(keys map[string]any) *libcni.NetworkConfigList {
	b.t.Helper()
	entry := map[string]any{"type": "netready", "stateDir": b.State, "timeout": "10s", "onTimeout": "fail", "logFile": b.Log,
		"checks": []any{map[string]any{"kind": "address"}, map[string]any{"kind": "ovsdb", "preset": "ovn-kubernetes", "socket": b.OVN.A.Conf}}}
	for k, v := range keys {
		entry[k] = v
	}
	data, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": b.Network, "plugins": []any{map[string]any{"type": "ovn-k8s-cni-overlay"}, entry}})
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		b.t.Fatal(err)
	}
	return list
}

// Add runs ADD for a client pod on node A, and DEL at cleanup.
func (b *CrossNodeBed) Add(list *libcni.NetworkConfigList, name, ip string) (*libcni.RuntimeConf, time.Duration, error) {
	ctx := context.Background()
	rt := &libcni.RuntimeConf{ContainerID: "xn-" + name + "-" + harness.RandomHex(3), NetNS: cnitest.NewNS(b.t).Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"STANDIN_IP", ip}}}
	b.t.Cleanup(func() { b.CNI.DelNetworkList(ctx, list, rt) })
	start := time.Now()
	_, err := b.CNI.AddNetworkList(ctx, list, rt)
	return rt, time.Since(start), err
}

// Connect is a client's first action: one TCP connection to the server.
func (b *CrossNodeBed) Connect(rt *libcni.RuntimeConf) error {
	return cnitest.FirstConnect(rt.NetNS, b.ServerIP+":8080")
}

// Lagged runs f with B's ovn-controller stopped, continued lag after the
// stop whatever f is doing; it returns once B runs again.
func (b *CrossNodeBed) Lagged(lag time.Duration, f func()) {
	b.OVN.B.Freeze(true)
	thawed := make(chan struct{})
	time.AfterFunc(lag, func() { b.OVN.B.Freeze(false); close(thawed) })
	f()
	<-thawed
}

// Marker reads the marker of a client's ADD.
func (b *CrossNodeBed) Marker(rt *libcni.RuntimeConf) *marker.Marker {
	b.t.Helper()
	m, err := marker.Store{Dir: b.State}.Read(marker.Key{Network: b.Network, ContainerID: rt.ContainerID, IfName: rt.IfName})
	if err != nil {
		b.t.Fatalf("marker of %s: %v", rt.ContainerID, err)
	}
	return m
}

// CrossNodeResult is a marker's cross-node check result, if any.
func CrossNodeResult(m *marker.Marker) (marker.CheckResult, bool) {
	i := slices.IndexFunc(m.Checks, func(c marker.CheckResult) bool { return c.Kind == "ovn-cross-node" })
	if i < 0 {
		return marker.CheckResult{}, false
	}
	return m.Checks[i], true
}
