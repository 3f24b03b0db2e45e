//go:build integration

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/netready/netready/pkg/ovsdb"
)

// ovsdbServer is a real ovsdb-server (Debian's openvswitch-switch) with the
// Open_vSwitch schema, on a private socket, and an empty br-int; no
// ovs-vswitchd runs, as --no-wait writes need none.
type ovsdbServer struct {
	t    testing.TB
	sock string
}

func startOVSDB(t testing.TB) *ovsdbServer {
	t.Helper()
	dir := t.TempDir()
	db := filepath.Join(dir, "conf.db")
	mustRun(t, "ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema")
	s := &ovsdbServer{t: t, sock: filepath.Join(dir, "db.sock")}
	cmd := exec.Command("ovsdb-server", db, "--remote=punix:"+s.sock, "--unixctl="+filepath.Join(dir, "ovsdb.ctl"), "--no-chdir",
		"--log-file="+filepath.Join(dir, "ovsdb-server.log"), "--pidfile="+filepath.Join(dir, "ovsdb-server.pid"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(s.sock); err == nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("ovsdb-server did not create its socket")
		}
	}
	s.vsctl("init")
	s.vsctl("add-br", "br-int")
	return s
}

func (s *ovsdbServer) vsctl(args ...string) {
	s.t.Helper()
	mustRun(s.t, "ovs-vsctl", append([]string{"--db=unix:" + s.sock, "--no-wait", "--timeout=10"}, args...)...)
}

// addPodPort does what ovn-kubernetes' CNI does for a pod (ConfigureOVS).
func (s *ovsdbServer) addPodPort(name, ifaceID, podUID, sandbox string) {
	s.vsctl("add-port", "br-int", name, "--", "set", "Interface", name,
		"external_ids:attached_mac=0a:58:0a:c8:00:05", "external_ids:iface-id="+ifaceID,
		"external_ids:iface-id-ver="+podUID, "external_ids:sandbox="+sandbox)
}

// ovnNet is conflists/ovn-kubernetes.conflist with ovn-kubernetes' own CNI
// (which cannot run here) replaced by bridge + host-local, and the preset
// pointed at the test's database.
func ovnNet(t testing.TB, sock, timeout string) *testNet {
	return newNet(t, "ovn-kubernetes.conflist", func(n *testNet, list map[string]any) {
		chain := list["plugins"].([]any)
		chain[0] = map[string]any{"type": "bridge", "bridge": n.Bridge, "isGateway": true, "ipMasq": false,
			"ipam": map[string]any{"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": n.Subnet}}}, "dataDir": t.TempDir()}}
		n.Netready()["timeout"] = timeout
		n.Netready()["checks"].([]any)[2].(map[string]any)["socket"] = sock
	})
}

// TestOVNKubernetesPreset, against a real ovsdb-server: ADD holds until
// external_ids:ovn-installed="true" is written on the pod's Interface, and
// returns moments after (an OVSDB monitor wakes it); an Interface that
// never gets it, and a database that is not there, time out naming what
// was seen.
func TestOVNKubernetesPreset(t *testing.T) {
	ctx := context.Background()
	pod := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", "web-0"}, {"K8S_POD_UID", "uid-web-0"}}
	t.Run("ovn-installed written later", func(t *testing.T) {
		db := startOVSDB(t)
		n := ovnNet(t, db.sock, "10s")
		cni, list := n.libcni()
		netns := newNS(t)
		rt := &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, NetNS: netns.Path(), IfName: "eth0", Args: pod}
		t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
		port := "nrovn" + n.ID
		db.addPodPort(port, "default_web-0", "uid-web-0", rt.ContainerID)
		wrote := make(chan time.Time, 1)
		go func() {
			time.Sleep(time.Second)
			db.vsctl("set", "Interface", port, "external_ids:ovn-installed=true")
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
		if m := n.readMarker(rt.ContainerID, "eth0"); m.State != "ready" {
			t.Errorf("marker = %+v", m)
		}
	})
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, n *testNet, sock string, cid string)
		want  string
	}{
		{"never installed", func(t *testing.T, n *testNet, sock, cid string) {
			(&ovsdbServer{t: t, sock: sock}).addPodPort("nrovn"+n.ID, "default_web-0", "uid-web-0", cid)
		}, "has no ovn-installed yet"},
		{"another pod's port", func(t *testing.T, n *testNet, sock, cid string) {
			(&ovsdbServer{t: t, sock: sock}).addPodPort("nrovn"+n.ID, "default_web-10", "uid-web-10", cid)
		}, `has iface-id "default_web-10", not "default_web-0"`},
		{"no port at all", func(t *testing.T, n *testNet, sock, cid string) {}, "no OVS Interface with external_ids:sandbox="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := startOVSDB(t)
			n := ovnNet(t, db.sock, "1500ms")
			rt := &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, IfName: "eth0", Args: pod}
			tc.setup(t, n, db.sock, rt.ContainerID)
			expectOVNTimeout(t, n, rt, tc.want)
		})
	}
	t.Run("the monitor wakes on a write", func(t *testing.T) {
		db := startOVSDB(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events, err := ovsdb.Monitor(ctx, db.sock, "Open_vSwitch", "Interface", []string{"external_ids"})
		if err != nil {
			t.Fatal(err)
		}
		db.addPodPort("nrmon0", "default_web-0", "uid", "sandbox-1")
		select {
		case <-events:
		case <-time.After(5 * time.Second):
			t.Fatal("no monitor update for a new Interface")
		}
		db.vsctl("set", "Interface", "nrmon0", "external_ids:ovn-installed=true")
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
		db := startOVSDB(t)
		_, err := ovsdb.Monitor(ctx, db.sock, "No_Such_Database", "Interface", []string{"external_ids"})
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("Monitor of a database the server does not have = %v, want its refusal", err)
		}
	})
	t.Run("database not there", func(t *testing.T) {
		n := ovnNet(t, filepath.Join(t.TempDir(), "db.sock"), "1500ms")
		expectOVNTimeout(t, n, &libcni.RuntimeConf{ContainerID: "ovn-" + n.ID, IfName: "eth0", Args: pod}, "no such file or directory")
	})
}

func expectOVNTimeout(t *testing.T, n *testNet, rt *libcni.RuntimeConf, want string) {
	t.Helper()
	ctx := context.Background()
	cni, list := n.libcni()
	netns := newNS(t)
	rt.NetNS = netns.Path()
	t.Cleanup(func() { cni.DelNetworkList(ctx, list, rt) })
	start := time.Now()
	_, err := cni.AddNetworkList(ctx, list, rt)
	if cniCode(err) != types.ErrTryAgainLater || !strings.Contains(err.Error(), "ovn-kubernetes Interface sandbox="+rt.ContainerID) || !strings.Contains(err.Error(), want) {
		t.Errorf("ADD = %v (code %d), want code 11 naming the Interface and %q", err, cniCode(err), want)
	}
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("a 1.5s timeout took %v", took)
	}
}
