//go:build integration

package plugin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/statedir"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestADDWaitsOnNothingWhileOff: with the sidecar's off note in stateDir,
// ADD of an entry whose check can never be met under fail (a file nobody
// writes, a 60 s timeout) returns its result at once and writes a pending
// marker, never a ready one; with the note gone, ADD waits again.
func TestADDWaitsOnNothingWhileOff(t *testing.T) {
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "60s"
		n.Netready()["onTimeout"] = "fail"
		n.Netready()["checks"] = []any{map[string]any{"kind": "file", "path": "/nonexistent/netready-never"}}
	})
	if err := os.WriteFile(filepath.Join(n.StateDir, statedir.Off), []byte("off\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cni, list := n.Libcni()
	ctx := context.Background()
	netns := cnitest.NewNS(t)
	rt := &libcni.RuntimeConf{ContainerID: "off-" + n.ID, NetNS: netns.Path(), IfName: "eth0"}
	start := time.Now()
	res, err := cni.AddNetworkList(ctx, list, rt)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("ADD while off = %v, want success", err)
	}
	t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
	if took > 10*time.Second {
		t.Errorf("ADD while off took %s, want at once (< 10s)", took)
	}
	if res == nil {
		t.Errorf("ADD while off printed no result, want the main plugin's")
	}
	m, err := marker.ReadFile(n.MarkerPath(rt.ContainerID, "eth0"))
	if err != nil {
		t.Fatalf("no marker after ADD while off: %v", err)
	}
	if m.State != marker.StatePending || m.Pending == nil || len(m.IPs) == 0 || !strings.HasPrefix(m.IPs[0], n.Prefix) {
		t.Errorf("marker state %q, pending %v, IPs %v: want pending, with what the sidecar needs to re-check, and the pod's IPs", m.State, m.Pending, m.IPs)
	}
	if log, _ := os.ReadFile(n.LogFile); !strings.Contains(string(log), "netready is switched off") {
		t.Errorf("the log does not say ADD did not wait:\n%s", log)
	}

	// On again: ADD waits, and times out under fail.
	os.Remove(filepath.Join(n.StateDir, statedir.Off))
	n.Netready()["timeout"] = "2s"
	cni, list = n.Libcni()
	rt2 := &libcni.RuntimeConf{ContainerID: "on-" + n.ID, NetNS: cnitest.NewNS(t).Path(), IfName: "eth0"}
	start = time.Now()
	if _, err := cni.AddNetworkList(ctx, list, rt2); err == nil || cnitest.CNICode(err) != 11 || time.Since(start) < 2*time.Second {
		t.Errorf("ADD with the switch on = %v (code %d) after %s, want code 11 after the 2s timeout", err, cnitest.CNICode(err), time.Since(start))
	}
	cni.DelNetworkList(ctx, list, rt2)
}
