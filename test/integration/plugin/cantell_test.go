//go:build integration

package plugin

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// podWithEth0 is a pod netns whose eth0 (a veth to a peer netns) is up,
// holding addrs.
func podWithEth0(t *testing.T, addrs ...string) string {
	t.Helper()
	pod, peer := cnitest.NewNS(t), cnitest.NewNS(t)
	harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "link", "add", "eth0", "type", "veth", "peer", "name", "peer0", "netns", cnitest.NSName(peer))
	harness.MustRun(t, "ip", "-n", cnitest.NSName(peer), "link", "set", "peer0", "up")
	harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "link", "set", "eth0", "up")
	for _, a := range addrs {
		harness.MustRun(t, "ip", "-n", cnitest.NSName(pod), "addr", "add", a, "dev", "eth0", "nodad")
	}
	return pod.Path()
}

// TestResultWithoutSandboxField: some main plugins return the pod's
// interface without its "sandbox" field. ADD then reads the pod's IPs from
// CNI_IFNAME in the netns, and records them; with none there either, the
// per-IP checks are unmet, named, never vacuously ready.
func TestResultWithoutSandboxField(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["timeout"] = "1s"
	})
	ip := n.Prefix + "7"
	noSandbox := func(nsPath string) []byte {
		return []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01"}],` +
			`"ips":[{"address":"` + ip + `/24","interface":0}],"dns":{}}`)
	}

	t.Run("addresses on the interface", func(t *testing.T) {
		pod := podWithEth0(t, ip+"/24")
		if _, e := cnitest.Invoke(t, "ADD", n.PluginConf(noSandbox(pod)), "CNI_CONTAINERID=nosb-a", "CNI_IFNAME=eth0", "CNI_NETNS="+pod); e != nil {
			t.Fatalf("ADD: %+v", e)
		}
		m := n.ReadMarker("nosb-a", "eth0")
		if m.State != marker.StateReady || len(m.IPs) != 1 || m.IPs[0] != ip+"/24" || len(m.Checks) != 1 || m.Checks[0].Target != ip {
			t.Errorf("marker state %s, IPs %v, checks %+v; want ready, [%s/24], the address check of %s", m.State, m.IPs, m.Checks, ip, ip)
		}
		// CHECK reads the same addresses, so the marker matches.
		if _, e := cnitest.Invoke(t, "CHECK", n.PluginConf(noSandbox(pod)), "CNI_CONTAINERID=nosb-a", "CNI_IFNAME=eth0", "CNI_NETNS="+pod); e != nil {
			t.Errorf("CHECK: %+v", e)
		}
	})
	t.Run("no address anywhere", func(t *testing.T) {
		pod := podWithEth0(t)
		start := time.Now()
		_, e := cnitest.Invoke(t, "ADD", n.PluginConf(noSandbox(pod)), "CNI_CONTAINERID=nosb-b", "CNI_IFNAME=eth0", "CNI_NETNS="+pod)
		if e == nil || e.Code != types.ErrTryAgainLater || !strings.Contains(e.Msg, "address (no pod IP)") || !strings.Contains(e.Msg, "lists none for eth0") {
			t.Errorf("ADD with no pod IP at all = %+v, want code 11 naming the address check with no pod IP", e)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("ADD with a 1s timeout took %s", d)
		}
	})
}

// TestSetOfTheOtherFamily: an nftables set of the other address family
// than every pod IP is never met. An ip6 table for an IPv4 pod, and an
// inet set keyed on IPv6 addresses, fail ADD at once under onTimeout
// "fail", naming the set; a dual-stack pod is checked against its own
// family's address.
func TestSetOfTheOtherFamily(t *testing.T) {
	table := "nrfam" + harness.RandomHex(3)
	if err := cnitest.ApplyNFT(fmt.Sprintf("add table ip6 %s\nadd set ip6 %s pods { type ipv6_addr; }\nadd table inet %s\nadd set inet %s pods6 { type ipv6_addr; }\n", table, table, table, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command("nft", "delete", "table", "ip6", table).Run()
		exec.Command("nft", "delete", "table", "inet", table).Run()
	})
	for _, tc := range []struct {
		name, family, set string
		want              string
	}{
		{"ip6 table, IPv4 pod", "ip6", "pods", "is of family ip6, and the pod has no address of that family"},
		{"inet set of IPv6 addresses, IPv4 pod", "inet", "pods6", "holds IPv6 addresses, and the pod has none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
				n.Netready()["checks"] = []any{map[string]any{"kind": "nftables", "family": tc.family, "table": table, "set": tc.set}}
				n.Netready()["timeout"] = "5s"
			})
			pod := podWithEth0(t, n.Prefix+"8/24")
			start := time.Now()
			_, e := cnitest.Invoke(t, "ADD", n.PluginConf(cnitest.PrevResult100(n.Prefix+"8/24", n.Prefix+"1", pod)), "CNI_CONTAINERID=fam", "CNI_IFNAME=eth0", "CNI_NETNS="+pod)
			if e == nil || e.Code != types.ErrInternal || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("ADD = %+v, want code 999 saying %q", e, tc.want)
			}
			if d := time.Since(start); d > 4*time.Second {
				t.Errorf("ADD took %s for a set that can never hold the pod's address", d)
			}
		})
	}
}

// TestProceedNeverFailsADDForANeverCheck: under onTimeout "proceed", a
// check that can never be met (a gateway check with a result that gives no
// gateway; an ip6 set for an IPv4 pod) costs the pod its readiness, never
// its start: ADD succeeds with a pending marker whose reason names the
// problem. Under "fail" the same ADD fails with code 999 and the same
// text. A netns that is gone fails ADD in both modes.
func TestProceedNeverFailsADDForANeverCheck(t *testing.T) {
	for _, mode := range []string{"proceed", "fail"} {
		t.Run(mode, func(t *testing.T) {
			n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
				n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "gateway"}}
				n.Netready()["timeout"] = "5s"
				n.Netready()["onTimeout"] = mode
			})
			pod := podWithEth0(t, n.Prefix+"9/24")
			noGateway := []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"` + pod + `"}],` +
				`"ips":[{"address":"` + n.Prefix + `9/24","interface":0}],"dns":{}}`)
			const why = "the result gives no gateway for any pod IP"
			_, e := cnitest.Invoke(t, "ADD", n.PluginConf(noGateway), "CNI_CONTAINERID=nogw", "CNI_IFNAME=eth0", "CNI_NETNS="+pod)
			switch mode {
			case "proceed":
				if e != nil {
					t.Fatalf("ADD under proceed with a check that can never be met = %+v, want success", e)
				}
				m := n.ReadMarker("nogw", "eth0")
				if m.State != marker.StatePending || m.Pending == nil || len(m.Checks) != 1 || !strings.Contains(m.Checks[0].Why, why) {
					t.Errorf("marker state %s, checks %+v; want pending, its reason naming %q", m.State, m.Checks, why)
				}
			case "fail":
				if e == nil || e.Code != types.ErrInternal || !strings.Contains(e.Msg, why) {
					t.Errorf("ADD under fail = %+v, want code 999 naming %q", e, why)
				}
			}
			gone := "/var/run/netns/nr-gone-" + harness.RandomHex(3)
			_, e = cnitest.Invoke(t, "ADD", n.PluginConf(cnitest.PrevResult100(n.Prefix+"10/24", n.Prefix+"1", gone)), "CNI_CONTAINERID=gone", "CNI_IFNAME=eth0", "CNI_NETNS="+gone)
			if e == nil || e.Code != types.ErrInternal || !strings.Contains(e.Msg, "the pod netns is gone") {
				t.Errorf("ADD into a netns that is gone, under %s = %+v, want code 999", mode, e)
			}
		})
	}
}
