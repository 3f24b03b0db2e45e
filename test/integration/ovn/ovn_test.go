//go:build integration

package ovn

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/ovsdb"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/cnitest"
)

// TestOVNPresetHoldsADDUntilOVNInstalled, against a real ovsdb-server: ADD holds until
// external_ids:ovn-installed="true" is written on the pod's Interface, and
// returns moments after (an OVSDB monitor wakes it); an Interface that
// never gets it, and a database that is not there, time out naming what
// was seen.
func TestOVNPresetHoldsADDUntilOVNInstalled(t *testing.T) {
	ctx := context.Background()
	pod := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}, {"K8S_POD_UID", "uid-web-0"}}
	t.Run("ovn-installed written later", func(t *testing.T) {
		db := agents.StartOVSDB(t)
		n := agents.OVNNet(t, db.Sock, "10s")
		cni, list := n.Libcni()
		netns := cnitest.NewNS(t)
		rt := &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, NetNS: netns.Path(), IfName: "eth0", Args: pod}
		t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		port := "nrovn" + n.ID
		db.AddPodPort(port, "default_web-0", "uid-web-0", rt.ContainerID)
		wrote := make(chan time.Time, 1)
		go func() {
			time.Sleep(time.Second)
			db.Vsctl("set", "Interface", port, "external_ids:ovn-installed=true")
			wrote <- time.Now()
		}()
		start := time.Now()
		if _, err := cni.AddNetworkList(ctx, list, rt); err != nil {
			t.Fatalf("ADD: %v", err)
		}
		returned := time.Now()
		w := <-wrote
		t.Logf("ADD returned %v after ovs-vsctl wrote ovn-installed (held %v)", returned.Sub(w).Round(time.Millisecond), returned.Sub(start).Round(time.Millisecond))
		if returned.Before(w.Add(-50 * time.Millisecond)) {
			t.Errorf("ADD returned %v before ovn-installed was written", w.Sub(returned))
		}
		if m := n.ReadMarker(rt.ContainerID, "eth0"); m.State != "ready" {
			t.Errorf("marker = %+v", m)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, n *cnitest.TestNet, sock string, cid string)
		want  string
	}{
		{"never installed", func(t *testing.T, n *cnitest.TestNet, sock, cid string) {
			(&agents.OVSDBServer{T: t, Sock: sock}).AddPodPort("nrovn"+n.ID, "default_web-0", "uid-web-0", cid)
		}, "has no ovn-installed yet"},
		{"another pod's port", func(t *testing.T, n *cnitest.TestNet, sock, cid string) {
			(&agents.OVSDBServer{T: t, Sock: sock}).AddPodPort("nrovn"+n.ID, "default_web-10", "uid-web-10", cid)
		}, `has iface-id "default_web-10", not "default_web-0"`},
		{"no port at all", func(t *testing.T, n *cnitest.TestNet, sock, cid string) {}, "no OVS Interface with external_ids:sandbox="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := agents.StartOVSDB(t)
			n := agents.OVNNet(t, db.Sock, "1500ms")
			rt := &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, IfName: "eth0", Args: pod}
			tc.setup(t, n, db.Sock, rt.ContainerID)
			expectOVNTimeout(t, n, rt, tc.want)
		})
	}
	t.Run("the monitor wakes on a write", func(t *testing.T) {
		db := agents.StartOVSDB(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events, err := ovsdb.Monitor(ctx, db.Sock, "Open_vSwitch", "Interface", []string{"external_ids"})
		if err != nil {
			t.Fatal(err)
		}
		db.AddPodPort("nrmon0", "default_web-0", "uid", "sandbox-1")
		select {
		case <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("no monitor update for a new Interface")
		}
		db.Vsctl("set", "Interface", "nrmon0", "external_ids:ovn-installed=true")
		select {
		case <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("no monitor update for ovn-installed")
		}
		cancel()
		for range events {
		}
	})
	t.Run("the monitor returns the server's refusal", func(t *testing.T) {
		db := agents.StartOVSDB(t)
		_, err := ovsdb.Monitor(ctx, db.Sock, "No_Such_Database", "Interface", []string{"external_ids"})
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Monitor of a database the server does not have = %v, want its refusal", err)
		}
	})
	t.Run("database not there", func(t *testing.T) {
		n := agents.OVNNet(t, filepath.Join(t.TempDir(), "db.sock"), "1500ms")
		expectOVNTimeout(t, n, &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, IfName: "eth0", Args: pod}, "no such file or directory")
	})
}

func expectOVNTimeout(t *testing.T, n *cnitest.TestNet, rt *libcni.RuntimeConf, want string) {
	t.Helper()
	ctx := context.Background()
	cni, list := n.Libcni()
	netns := cnitest.NewNS(t)
	rt.NetNS = netns.Path()
	t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
	start := time.Now()
	_, err := cni.AddNetworkList(ctx, list, rt)
	if cnitest.CNICode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "ovn-kubernetes Interface sandbox="+rt.ContainerID) || !strings.Contains(err.Error(), want) {
		t.Errorf("ADD = %v (code %d), want code 11 naming the Interface and %q", err, cnitest.CNICode(err), want)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("a 1.5s timeout took %v", took)
	}
}
