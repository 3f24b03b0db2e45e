//go:build integration

package ovn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
)

// ovnFirstPacketPods is how many pods each arm of TestFirstConnectionSucceedsThroughOVN starts.
const ovnFirstPacketPods = 10

// TestFirstConnectionSucceedsThroughOVN: through a real OVN's datapath (ovs-vswitchd on the
// userspace datapath, flows from the real ovn-controller) with OVN ACLs as
// ovn-kubernetes renders a NetworkPolicy (a default deny to the server's
// port, and an allow-related for each pod's IP that the test's controller
// adds with the pod's logical port), each pod opens one TCP connection
// right after ADD returns. With netready's ovn-kubernetes preset in the
// chain every first connection must succeed; the control, the same chain
// without netready, shows how many fail.
func TestFirstConnectionSucceedsThroughOVN(t *testing.T) {
	ovn := agents.StartRealOVN(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.MkdirAll(bin, 0o755)
	harness.CopyFile(t, filepath.Join(harness.BinDir, "netready-standin"), filepath.Join(bin, "ovn-k8s-cni-overlay"), 0o755)
	harness.CopyFile(t, filepath.Join(harness.BinDir, "netready"), filepath.Join(bin, "netready"), 0o755)
	hook := filepath.Join(dir, "ovnkube-node.sh")
	// ovnkube-node's part for each pod: its logical switch port (and, as
	// the test's policy controller, the pod's allow ACL in the same
	// transaction), then its host veth on br-int named by iface-id.
	os.WriteFile(hook, []byte(fmt.Sprintf(`#!/bin/sh
set -e
port="${K8S_POD_NAMESPACE}_${K8S_POD_NAME}"
case "$K8S_POD_NAME" in server|deny-*) noacl=1 ;; esac
if [ -n "$noacl" ]; then
  ovn-nbctl --db=unix:%[1]s --timeout=10 lsp-add nr-node "$port" -- lsp-set-addresses "$port" "$POD_MAC $POD_IP"
else
  ovn-nbctl --db=unix:%[1]s --timeout=10 lsp-add nr-node "$port" -- lsp-set-addresses "$port" "$POD_MAC $POD_IP" \
    -- acl-add nr-node to-lport 1000 "outport == \"default_server\" && ip4.src == $POD_IP && tcp.dst == 8080" allow-related
fi
ip link set "$HOST_VETH" netns %[2]s
ip -n %[2]s link set "$HOST_VETH" up
ovs-vsctl --db=unix:%[3]s --timeout=10 --no-wait add-port br-int "$HOST_VETH" -- set Interface "$HOST_VETH" \
  external_ids:iface-id="$port" external_ids:attached_mac="$POD_MAC" external_ids:sandbox="$CNI_CONTAINERID"
`, ovn.NB, ovn.VswitchdNS, ovn.Conf)), 0o755)
	os.WriteFile(filepath.Join(bin, "ovn-k8s-cni-overlay.standin.json"),
		[]byte(fmt.Sprintf(`{"subnet": "10.200.95.0/24", "hook": %q, "txChecksumOff": true}`, hook)), 0o644)
	// The policy: nothing reaches the server's port but what an allow
	// names.
	ovn.Nbctl("acl-add", "nr-node", "to-lport", "900", `outport == "default_server" && ip4`, "drop")

	state := filepath.Join(dir, "state")
	chain := func(withNetready bool) *libcni.NetworkConfigList {
		var entry map[string]any
		if withNetready {
			entry = map[string]any{"type": "netready", "stateDir": state, "timeout": "10s", "onTimeout": "fail",
				"logFile": filepath.Join(dir, "netready.log"),
				"checks":  []any{map[string]any{"kind": "address"}, map[string]any{"kind": "ovsdb", "preset": "ovn-kubernetes", "socket": ovn.Conf}}}
		}
		return cnitest.AgentChain(t, "ovn-fp", map[string]any{"type": "ovn-k8s-cni-overlay"}, entry)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(dir, "cache"), nil)
	ctx := context.Background()
	add := func(list *libcni.NetworkConfigList, name, ip string) (*libcni.RuntimeConf, error) {
		rt := &libcni.RuntimeConf{ContainerID: "ovnfp-" + name + "-" + harness.RandomHex(3), NetNS: cnitest.NewNS(t).Path(), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", name}, {"STANDIN_IP", ip}}}
		t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		_, err := cni.AddNetworkList(ctx, list, rt)
		return rt, err
	}

	// The server, through the plain chain, once its port is installed.
	const serverIP = "10.200.95.2"
	srv, err := add(chain(false), "server", serverIP)
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); !strings.Contains(ovn.Output("ovs-vsctl", "--db=unix:"+ovn.Conf, "--timeout=10", "--columns=external_ids", "find", "Interface", "external_ids:sandbox="+srv.ContainerID), "ovn-installed"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("the server's port never got ovn-installed; ovn-controller:\n%s", ovn.Log("controller"))
		}
	}
	cnitest.ServeTCP(t, srv.NetNS, 8080)
	connect := func(rt *libcni.RuntimeConf) error { return cnitest.FirstConnect(rt.NetNS, serverIP+":8080") }
	var controlPods []*libcni.RuntimeConf
	run := func(withNetready bool, first int) (ok int, waits []time.Duration, fails []string) {
		list := chain(withNetready)
		for i := 0; i < ovnFirstPacketPods; i++ {
			name := fmt.Sprintf("web-%d", first+i)
			start := time.Now()
			rt, err := add(list, name, fmt.Sprintf("10.200.95.%d", 10+first+i))
			if err != nil {
				t.Fatalf("ADD %s: %v", name, err)
			}
			waits = append(waits, time.Since(start))
			if !withNetready {
				controlPods = append(controlPods, rt)
			}
			if err := connect(rt); err != nil {
				fails = append(fails, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			ok++
		}
		return ok, waits, fails
	}

	control, controlWaits, controlFails := run(false, 0)
	t.Logf("without netready: %d of %d first connections through OVN succeeded (ADD took %v); failed: %v", control, ovnFirstPacketPods, roundAll(controlWaits), controlFails)
	// The control's pods do connect once OVN caught up: what failed was
	// the window, not the set-up.
	time.Sleep(2 * time.Second)
	later := 0
	for _, rt := range controlPods {
		if connect(rt) == nil {
			later++
		}
	}
	t.Logf("without netready, 2 s later: %d of %d connect", later, ovnFirstPacketPods)
	if later != ovnFirstPacketPods {
		t.Errorf("only %d of %d control pods connect even 2 s after ADD: the datapath, not the window, fails them", later, ovnFirstPacketPods)
	}
	with, waits, fails := run(true, ovnFirstPacketPods)
	t.Logf("with netready (ovn-kubernetes preset): %d of %d succeeded (ADD took %v)", with, ovnFirstPacketPods, roundAll(waits))
	if with != ovnFirstPacketPods {
		t.Errorf("with netready only %d of %d first connections succeeded: %v", with, ovnFirstPacketPods, fails)
	}
	if control == ovnFirstPacketPods {
		t.Errorf("without netready every first connection succeeded too: the test shows no window, so it proves nothing")
	}
	// The policy is real: a pod with no allow is ready (its port is in)
	// and still cannot reach the server.
	deny, err := add(chain(true), "deny-0", "10.200.95.200")
	if err != nil {
		t.Fatalf("ADD deny-0: %v", err)
	}
	if err := connect(deny); err == nil {
		t.Error("a pod with no allow ACL reached the server: the default deny is not enforced, so the allows prove nothing")
	}
	flows := ovn.Output("ovs-ofctl", "dump-flows", "br-int")
	if !strings.Contains(flows, "ct_state") {
		t.Errorf("br-int has no conntrack flows: OVN did not render the ACLs as stateful")
	}
}

// roundAll rounds durations for a log line.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
