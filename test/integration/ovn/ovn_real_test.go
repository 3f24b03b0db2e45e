//go:build integration

package ovn

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestOVNControllerSetsOVNInstalled: with a real OVN (NB and SB databases,
// ovn-northd, ovs-vswitchd on the userspace datapath, ovn-controller), the
// ovn-kubernetes preset holds ADD until ovn-controller itself, not the
// test, sets external_ids:ovn-installed on the pod's Interface once the
// logical port's flows are in; a frozen ovn-controller (SIGSTOP) makes
// ADD time out with the preset's reason and fail closed under onTimeout
// "fail"; and a pod re-created under the same name (same iface-id, new
// sandbox) is never taken for ready from the old sandbox's Interface,
// which still says ovn-installed.
func TestOVNControllerSetsOVNInstalled(t *testing.T) {
	ovn := agents.StartRealOVN(t)
	t.Logf("real OVN up (3 ovsdb-servers, northd, vswitchd, controller, chassis registered) in %s", ovn.Started.Round(time.Millisecond))
	ctx := context.Background()
	add := func(n *cnitest.TestNet, rt *libcni.RuntimeConf, port, ifaceID, ip string, after time.Duration) (time.Time, error) {
		cni, list := n.Libcni()
		portErr := make(chan error, 1)
		go func() {
			time.Sleep(after)
			portErr <- ovn.AddPort(port, ifaceID, "0a:58:0a:c8:00:05", ip, rt.ContainerID, "uid-web-0")
		}()
		_, err := cni.AddNetworkList(ctx, list, rt)
		returned := time.Now()
		if perr := <-portErr; perr != nil {
			t.Fatalf("the pod's port: %v", perr)
		}
		return returned, err
	}
	pod := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}, {"K8S_POD_UID", "uid-web-0"}}

	n := agents.OVNNet(t, ovn.Conf, "10s")
	first := &libcni.RuntimeConf{ContainerID: "ovnreal1-" + n.ID, NetNS: cnitest.NewNS(t).Path(), IfName: "eth0", Args: pod}
	t.Cleanup(func() { cni, list := n.Libcni(); cni.DelNetworkList(ctx, list, first) })
	returned, err := add(n, first, "nrp1"+n.ID, "default_web-0", n.Prefix+"5", 300*time.Millisecond)
	if err != nil {
		t.Fatalf("ADD with a real ovn-controller: %v", err)
	}
	ids := ovn.InterfaceIDs("nrp1" + n.ID)
	if !strings.Contains(ids, `ovn-installed="true"`) {
		t.Fatalf("ADD returned, but the Interface carries no ovn-installed: %s", ids)
	}
	m := n.ReadMarker(first.ContainerID, "eth0")
	if m.State != "ready" {
		t.Errorf("marker %s, want ready", m.State)
	}
	if ts := agents.OVSMapValue(ids, "ovn-installed-ts"); ts != "" {
		ms, _ := strconv.ParseInt(ts, 10, 64)
		set := time.UnixMilli(ms)
		t.Logf("ovn-controller set ovn-installed %s after ADD began; ADD returned %s after that (waited %d ms in all)",
			set.Sub(m.CreatedAt.Time).Round(time.Millisecond), returned.Sub(set).Round(time.Millisecond), m.WaitedMs)
		if returned.Before(set) {
			t.Errorf("ADD returned at %s, before ovn-controller set ovn-installed at %s", returned, set)
		}
	}

	t.Run("a frozen ovn-controller times ADD out, failing closed", func(t *testing.T) {
		n := agents.OVNNet(t, ovn.Conf, "1500ms")
		ovn.Freeze(true)
		defer ovn.Freeze(false)
		rt := &libcni.RuntimeConf{ContainerID: "ovnreal2-" + n.ID, NetNS: cnitest.NewNS(t).Path(), IfName: "eth0",
			Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-1"}, {"K8S_POD_UID", "uid-web-1"}}}
		start := time.Now()
		_, err := add(n, rt, "nrp2"+n.ID, "default_web-1", n.Prefix+"6", 100*time.Millisecond)
		cni, list := n.Libcni()
		cni.DelNetworkList(ctx, list, rt)
		if cnitest.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "has no ovn-installed yet") {
			t.Errorf("ADD with ovn-controller frozen = %v, want code 11 naming ovn-installed", err)
		}
		if d := time.Since(start); d > 6*time.Second {
			t.Errorf("ADD with a 1.5 s timeout took %s", d)
		}
	})

	t.Run("a re-created pod waits for its own Interface", func(t *testing.T) {
		cni, list := n.Libcni()
		if err := cni.DelNetworkList(ctx, list, first); err != nil {
			t.Fatal(err)
		}
		// The old sandbox's Interface stays, ovn-installed and all, as a
		// leftover row would; the new sandbox's has the same iface-id.
		n2 := agents.OVNNet(t, ovn.Conf, "1500ms")
		ovn.Freeze(true)
		defer ovn.Freeze(false)
		again := &libcni.RuntimeConf{ContainerID: "ovnreal3-" + n.ID, NetNS: cnitest.NewNS(t).Path(), IfName: "eth0", Args: pod}
		_, err := add(n2, again, "nrp3"+n.ID, "default_web-0", n.Prefix+"5", 100*time.Millisecond)
		cni2, list2 := n2.Libcni()
		cni2.DelNetworkList(ctx, list2, again)
		if cnitest.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "sandbox="+again.ContainerID) {
			t.Errorf("ADD of the re-created pod = %v, want a timeout on its own sandbox's Interface, not ready from the old one", err)
		}
		if !strings.Contains(ovn.InterfaceIDs("nrp1"+n.ID), `ovn-installed="true"`) {
			t.Error("the old Interface lost ovn-installed: the test proves nothing")
		}
	})
}
