//go:build integration

package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

// resultIPs lists the IPs of a printed CNI result.
func resultIPs(t *testing.T, out string) []string {
	t.Helper()
	var r current.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("result %q: %v", out, err)
	}
	var ips []string
	for _, ip := range r.IPs {
		ips = append(ips, ip.Address.String())
	}
	return ips
}

func checkKinds(m *marker.Marker) []string {
	var out []string
	for _, c := range m.Checks {
		s := c.Kind + " " + c.Target
		if !c.Ready {
			s += " (not ready)"
		}
		out = append(out, s)
	}
	return out
}

// TestBridgeLifecycle: bridge + host-local + netready (1.1.0) through the
// real cnitool: ADD, CHECK, STATUS, DEL twice.
func TestBridgeLifecycle(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	netns := cnitest.NewNS(t)
	cid := cnitest.ContainerID(netns.Path())

	out, err := n.Add(netns.Path(), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_UID=uid-1")
	if err != nil {
		t.Fatal(err)
	}
	ips := resultIPs(t, out)
	if len(ips) != 1 || !strings.HasPrefix(ips[0], n.Prefix) {
		t.Fatalf("result IPs = %v, want one in %s", ips, n.Subnet)
	}
	m := n.ReadMarker(cid, "eth0")
	podIP := strings.Split(ips[0], "/")[0]
	gw := n.Prefix + "1"
	want := []string{"address " + podIP, "route " + podIP, "gateway " + gw}
	if diff := cmp.Diff(want, checkKinds(m)); diff != "" {
		t.Errorf("marker checks (-want +got):\n%s", diff)
	}
	if m.State != marker.StateReady || m.ReadyAt == nil || !slices.Equal(m.IPs, ips) ||
		m.NetNS != netns.Path() || m.ContainerID != cid || m.Network != n.Name {
		t.Errorf("marker = %+v, want ready for %v in %s", m, ips, netns.Path())
	}
	if diff := cmp.Diff(attachment.Pod{Namespace: "default", Name: "web-0", UID: "uid-1"}, m.Pod); diff != "" {
		t.Errorf("marker pod (-want +got):\n%s", diff)
	}
	info, _ := os.Stat(n.MarkerPath(cid, "eth0"))
	if info.Mode().Perm() != 0o644 {
		t.Errorf("marker mode = %v, want 0644", info.Mode().Perm())
	}

	if _, err := n.Cnitool("check", netns.Path()); err != nil {
		t.Errorf("CHECK after ADD: %v", err)
	}
	if _, err := n.Cnitool("status", netns.Path()); err != nil {
		t.Errorf("STATUS: %v", err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := n.Cnitool("del", netns.Path()); err != nil {
			t.Errorf("DEL #%d: %v", i, err)
		}
		if _, err := os.Stat(n.MarkerPath(cid, "eth0")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after DEL #%d the marker is still there (%v)", i, err)
		}
	}
	// containerd's second DEL comes without a netns.
	conf := n.PluginConf(nil)
	if _, e := cnitest.Invoke(t, "DEL", conf, "CNI_CONTAINERID="+cid, "CNI_IFNAME=eth0", "CNI_NETNS="); e != nil {
		t.Errorf("DEL with empty CNI_NETNS: %v", e)
	}
}

// TestPTPv031: a 0.3.1 conflist with ptp; the result comes back in 0.3.1.
func TestPTPv031(t *testing.T) {
	n := cnitest.NewNet(t, "ptp-v031.conflist", nil)
	netns := cnitest.NewNS(t)
	cid := cnitest.ContainerID(netns.Path())
	out, err := n.Add(netns.Path())
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	json.Unmarshal([]byte(out), &r)
	if r["cniVersion"] != "0.3.1" {
		t.Errorf("result cniVersion = %v, want 0.3.1", r["cniVersion"])
	}
	ips := resultIPs(t, out)
	m := n.ReadMarker(cid, "eth0")
	podIP := strings.Split(ips[0], "/")[0]
	if diff := cmp.Diff([]string{"address " + podIP, "route " + podIP}, checkKinds(m)); diff != "" {
		t.Errorf("default checks (-want +got):\n%s", diff)
	}
	// CHECK does not exist before 0.4.0: libcni refuses it, the plugin too.
	if _, err := n.Cnitool("check", netns.Path()); err == nil {
		t.Errorf("CHECK on a 0.3.1 conflist succeeded")
	}
	for i := 1; i <= 2; i++ {
		if _, err := n.Cnitool("del", netns.Path()); err != nil {
			t.Errorf("DEL #%d: %v", i, err)
		}
	}
	if _, err := os.Stat(n.MarkerPath(cid, "eth0")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("marker survived DEL: %v", err)
	}
}

// TestDualStackChecksEveryIP: IPv4 and IPv6 on one bridge; every check per IP, including
// the IPv6 gateway, which answers only once the bridge's own DAD is done.
func TestDualStackChecksEveryIP(t *testing.T) {
	n := cnitest.NewNet(t, "dualstack.conflist", nil)
	netns := cnitest.NewNS(t)
	cid := cnitest.ContainerID(netns.Path())
	out, err := n.Add(netns.Path())
	if err != nil {
		t.Fatal(err)
	}
	ips := resultIPs(t, out)
	if len(ips) != 2 {
		t.Fatalf("result IPs = %v, want IPv4 and IPv6", ips)
	}
	m := n.ReadMarker(cid, "eth0")
	v4, v6 := strings.Split(ips[0], "/")[0], strings.Split(ips[1], "/")[0]
	gw6 := strings.TrimSuffix(n.Subnet6, "/64") + "1"
	want := []string{"address " + v4, "address " + v6, "route " + v4, "route " + v6, "gateway " + n.Prefix + "1", "gateway " + gw6}
	if diff := cmp.Diff(want, checkKinds(m)); diff != "" {
		t.Errorf("marker checks (-want +got):\n%s", diff)
	}
	// The pod's IPv6 address is really there and not tentative.
	addrs := harness.MustRun(t, "ip", "-n", cnitest.NSName(netns), "-6", "addr", "show", "dev", "eth0")
	if !strings.Contains(addrs, v6) || strings.Contains(addrs, "tentative") {
		t.Errorf("pod IPv6 state:\n%s", addrs)
	}
	if _, err := n.Cnitool("check", netns.Path()); err != nil {
		t.Errorf("CHECK: %v", err)
	}
}

// TestCheckFailsWhenDatapathBreaks: CHECK must notice a removed route or a
// removed pod address.
func TestCheckFailsWhenDatapathBreaks(t *testing.T) {
	t.Run("route removed", func(t *testing.T) {
		n := cnitest.NewNet(t, "bridge.conflist", nil)
		netns := cnitest.NewNS(t)
		if _, err := n.Add(netns.Path()); err != nil {
			t.Fatal(err)
		}
		harness.MustRun(t, "ip", "route", "del", n.Subnet, "dev", n.Bridge)
		_, err := n.Cnitool("check", netns.Path())
		if err == nil || !strings.Contains(err.Error(), "check route "+n.Prefix) {
			t.Errorf("CHECK after route removal = %v, want a failure naming the route check", err)
		}
	})
	t.Run("address removed", func(t *testing.T) {
		n := cnitest.NewNet(t, "bridge.conflist", nil)
		netns := cnitest.NewNS(t)
		out, err := n.Add(netns.Path())
		if err != nil {
			t.Fatal(err)
		}
		ip := resultIPs(t, out)[0]
		harness.MustRun(t, "ip", "-n", cnitest.NSName(netns), "addr", "del", ip, "dev", "eth0")
		// bridge's own CHECK would notice first in a chain; ask netready
		// alone, with the chain's result as prevResult.
		_, e := cnitest.Invoke(t, "CHECK", n.PluginConf([]byte(out)), "CNI_CONTAINERID="+cnitest.ContainerID(netns.Path()),
			"CNI_IFNAME=eth0", "CNI_NETNS="+netns.Path())
		if e == nil || !strings.Contains(e.Msg, "check address "+strings.Split(ip, "/")[0]) {
			t.Errorf("CHECK after address removal = %+v, want a failure naming the address check", e)
		}
	})
	// As a Cilium ADD with crossNode leaves it for an ungated pod, whose
	// CiliumEndpoint the sidecar never looks at: pending for good, its
	// local checks met. CHECK must still look at them.
	t.Run("address removed, marker waiting only on the CiliumEndpoint", func(t *testing.T) {
		n := cnitest.NewNet(t, "bridge.conflist", nil)
		netns := cnitest.NewNS(t)
		out, err := n.Add(netns.Path())
		if err != nil {
			t.Fatal(err)
		}
		cid := cnitest.ContainerID(netns.Path())
		m := n.ReadMarker(cid, "eth0")
		m.State, m.ReadyAt = marker.StatePending, nil
		m.Checks = append(m.Checks, marker.CheckResult{Kind: checks.KindCiliumPublished, Target: "CiliumEndpoint", Why: "left to the sidecar"})
		m.Pending = &marker.Pending{CiliumPublished: true}
		if err := (marker.Store{Dir: n.StateDir}).Write(m); err != nil {
			t.Fatal(err)
		}
		ip := resultIPs(t, out)[0]
		harness.MustRun(t, "ip", "-n", cnitest.NSName(netns), "addr", "del", ip, "dev", "eth0")
		_, e := cnitest.Invoke(t, "CHECK", n.PluginConf([]byte(out)), "CNI_CONTAINERID="+cid, "CNI_IFNAME=eth0", "CNI_NETNS="+netns.Path())
		if e == nil || !strings.Contains(e.Msg, "check address "+strings.Split(ip, "/")[0]) {
			t.Errorf("CHECK of a marker waiting only on its CiliumEndpoint, address removed = %+v, want a failure naming the address check", e)
		}
	})
}

// noGateway makes the bridge carry no IP: the host has no route to the pod
// subnet until the test (standing in for an agent) programs it.
func noGateway(timeout, onTimeout string) func(*cnitest.TestNet, map[string]any) {
	return func(n *cnitest.TestNet, list map[string]any) {
		for _, p := range cnitest.Plugins(list) {
			if p["type"] == "bridge" {
				p["isGateway"] = false
			}
		}
		nr := n.Netready()
		nr["timeout"] = timeout
		nr["onTimeout"] = onTimeout
	}
}

// TestAddWaitsForRoute: ADD returns only after the route appears, 1 s after
// ADD started, and the marker shows the wait.
func TestAddWaitsForRoute(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", noGateway("20s", "fail"))
	netns := cnitest.NewNS(t)
	cid := cnitest.ContainerID(netns.Path())

	type res struct {
		out string
		err error
	}
	done := make(chan res, 1)
	go func() {
		out, err := n.Add(netns.Path())
		done <- res{out, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("ADD returned before the route existed: %v %s", r.err, r.out)
	case <-time.After(time.Second):
	}
	added := time.Now()
	harness.MustRun(t, "ip", "addr", "add", n.Prefix+"1/24", "dev", n.Bridge)
	var r res
	select {
	case r = <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("ADD did not return within 15 s of the route appearing")
	}
	if r.err != nil {
		t.Fatalf("ADD: %v", r.err)
	}
	// Each wait is measured from ADD's start (the marker's createdAt):
	// the route and gateway held only once the route was added, the
	// address from the start. Milliseconds are truncated: 2 ms of slack.
	m := n.ReadMarker(cid, "eth0")
	heldAt := func(ms int64) time.Time { return m.CreatedAt.Add(time.Duration(ms+2) * time.Millisecond) }
	if m.State != marker.StateReady || heldAt(m.WaitedMs).Before(added) {
		t.Errorf("marker state %s, ready %s, want ready after the route was added at %s", m.State,
			heldAt(m.WaitedMs).Format(time.StampMicro), added.Format(time.StampMicro))
	}
	for _, c := range m.Checks {
		if !c.Ready {
			t.Errorf("check %s %s not ready", c.Kind, c.Target)
		}
		if (c.Kind == "route" || c.Kind == "gateway") && heldAt(c.WaitedMs).Before(added) {
			t.Errorf("check %s held %s, before the route was added at %s", c.Kind, heldAt(c.WaitedMs).Format(time.StampMicro), added.Format(time.StampMicro))
		}
		if c.Kind == "address" && !heldAt(c.WaitedMs).Before(added) {
			t.Errorf("address check waitedMs = %d; it held from the start", c.WaitedMs)
		}
	}
}

// TestAddGivesUpAtItsTimeout: with nothing programming the route, ADD gives up at its
// timeout: code 11 and no marker with "fail"; a pending marker with
// "proceed".
func TestAddGivesUpAtItsTimeout(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		n := cnitest.NewNet(t, "bridge.conflist", noGateway("1s", "fail"))
		netns := cnitest.NewNS(t)
		cni, list := n.Libcni()
		rt := &libcni.RuntimeConf{ContainerID: "timeout-fail", NetNS: netns.Path(), IfName: "eth0"}
		t.Cleanup(func() { cni.DelNetworkList(context.Background(), list, rt) })
		start := time.Now()
		_, err := cni.AddNetworkList(context.Background(), list, rt)
		elapsed := time.Since(start)
		if cnitest.CNICode(err) != types.ErrTryAgainLater {
			t.Fatalf("ADD = %v (code %d), want code 11", err, cnitest.CNICode(err))
		}
		var cerr *types.Error
		errors.As(err, &cerr)
		msg := cerr.Msg
		for _, w := range []string{"netready: timed out after 1s waiting for: ", "route " + n.Prefix, "gateway " + n.Prefix + "1"} {
			if !strings.Contains(msg, w) {
				t.Errorf("message %q lacks %q", msg, w)
			}
		}
		if strings.Contains(msg, "address ") {
			t.Errorf("message %q names the address check, which held", msg)
		}
		if elapsed > 5*time.Second {
			t.Errorf("a 1s timeout took %s", elapsed)
		}
		if _, err := os.Stat(n.MarkerPath("timeout-fail", "eth0")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a failed ADD left a marker (%v)", err)
		}
	})
	t.Run("proceed", func(t *testing.T) {
		n := cnitest.NewNet(t, "bridge.conflist", noGateway("1s", "proceed"))
		netns := cnitest.NewNS(t)
		cid := cnitest.ContainerID(netns.Path())
		if _, err := n.Add(netns.Path()); err != nil {
			t.Fatalf("ADD with onTimeout proceed: %v", err)
		}
		m := n.ReadMarker(cid, "eth0")
		if m.State != marker.StatePending || m.ReadyAt != nil || m.Pending == nil || len(m.Pending.Checks) != 3 {
			t.Fatalf("marker = %+v, want pending with the checks to go on with", m)
		}
		if m.Pending.Gateways[strings.Split(m.IPs[0], "/")[0]] != n.Prefix+"1" {
			t.Errorf("pending gateways = %v", m.Pending.Gateways)
		}
		var unmet []string
		for _, c := range m.Checks {
			if !c.Ready {
				unmet = append(unmet, c.Kind)
			}
		}
		if diff := cmp.Diff([]string{"route", "gateway"}, unmet); diff != "" {
			t.Errorf("unmet checks (-want +got):\n%s", diff)
		}
		// CRI-O calls CHECK right after ADD: a pending marker is no failure.
		if _, err := n.Cnitool("check", netns.Path()); err != nil {
			t.Errorf("CHECK with a pending marker: %v", err)
		}
	})
}

// TestGCRemovesOnlyThisNetworksOtherMarkers: GC through libcni with valid attachments removes only this
// network's other markers.
func TestGCRemovesOnlyThisNetworksOtherMarkers(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	other := cnitest.NewNet(t, "bridge.conflist", nil)
	other.StateDir = n.StateDir
	other.Netready()["stateDir"] = n.StateDir
	other.Write()
	keep, drop, foreign := cnitest.NewNS(t), cnitest.NewNS(t), cnitest.NewNS(t)
	for _, ns := range []string{keep.Path(), drop.Path()} {
		if _, err := n.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := other.Add(foreign.Path()); err != nil {
		t.Fatal(err)
	}
	cni, list := n.Libcni()
	err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{
		ValidAttachments: []types.GCAttachment{{ContainerID: cnitest.ContainerID(keep.Path()), IfName: "eth0"}},
	})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	exists := func(n *cnitest.TestNet, ns string) bool {
		_, err := os.Stat(n.MarkerPath(cnitest.ContainerID(ns), "eth0"))
		return err == nil
	}
	got := map[string]bool{"kept": exists(n, keep.Path()), "dropped": exists(n, drop.Path()), "other network": exists(other, foreign.Path())}
	want := map[string]bool{"kept": true, "dropped": false, "other network": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("markers present after GC (-want +got):\n%s", diff)
	}
}

// TestGCWithoutAKeepListRemovesNoMarker: GC whose cni.dev/valid-attachments is null (what
// libcni sends for a runtime with no sandboxes, as CRI-O does at start) or
// missing says nothing about which attachments live, so it removes no
// marker; an explicit empty list removes them all.
func TestGCWithoutAKeepListRemovesNoMarker(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	a, b := cnitest.NewNS(t), cnitest.NewNS(t)
	for _, ns := range []string{a.Path(), b.Path()} {
		if _, err := n.Add(ns); err != nil {
			t.Fatal(err)
		}
	}
	count := func() int {
		entries, _ := os.ReadDir(filepath.Join(n.StateDir, n.Name))
		c := 0
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".json") {
				c++
			}
		}
		return c
	}
	cni, list := n.Libcni()
	if err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{}); err != nil {
		t.Fatalf("GC with a null keep-list: %v", err)
	}
	if got := count(); got != 2 {
		t.Errorf("markers after GC with a null keep-list = %d, want 2: null says nothing about which attachments live", got)
	}
	conf := map[string]any{}
	json.Unmarshal(n.PluginConf(nil), &conf)
	conf["cniVersion"] = "1.1.0"
	stdin, _ := json.Marshal(conf)
	if out, e := cnitest.Invoke(t, "GC", stdin, "CNI_PATH="+harness.PluginPath); e != nil {
		t.Fatalf("GC with no keep-list key = %+v (%s), want success", e, out)
	}
	if got := count(); got != 2 {
		t.Errorf("markers after GC with no keep-list key = %d, want 2", got)
	}
	if err := cni.GCNetworkList(context.Background(), list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{}}); err != nil {
		t.Fatalf("GC with an empty keep-list: %v", err)
	}
	if got := count(); got != 0 {
		t.Errorf("markers after GC with an explicit empty keep-list = %d, want 0", got)
	}
}

// TestStatusFailsWhenTheStateFolderIsUnusable: STATUS succeeds when the state folder is usable and fails with
// code 50 when it is not.
func TestStatusFailsWhenTheStateFolderIsUnusable(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	cni, list := n.Libcni()
	if err := cni.GetStatusNetworkList(context.Background(), list); err != nil {
		t.Fatalf("STATUS: %v", err)
	}
	blocker := n.StateDir + "/file"
	os.WriteFile(blocker, nil, 0o644)
	n.Netready()["stateDir"] = blocker + "/state"
	cni, list = n.Libcni()
	err := cni.GetStatusNetworkList(context.Background(), list)
	var cerr *types.Error
	if !errors.As(err, &cerr) || cerr.Code != types.ErrPluginNotAvailable || !strings.HasPrefix(cerr.Msg, "netready: ") ||
		!strings.Contains(err.Error(), "state directory") {
		t.Errorf("STATUS with an unusable stateDir = %v (code %d), want code 50 naming the state directory", err, cnitest.CNICode(err))
	}
}
