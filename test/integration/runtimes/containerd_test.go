//go:build integration

package runtimes

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/runtimes"
)

// startCRI starts containerd and imports the pause image. Cleanup removes
// every pod, stops containerd and unmounts what it left.
func startCRI(t *testing.T, confDir string, binDirs ...string) *runtimes.CRI {
	t.Helper()
	return runtimes.StartCRIWith(t, confDir, nil, binDirs...)
}

// TestContainerdHoldsRunpUntilTheAgentPrograms: under a real containerd, with netready chained in by
// netready-install, `crictl runp` is held by netready's ADD until the agent
// programs the pod; filling the /29 pool (poolAction "notready")
// makes the node's network not ready with netready's message and freeing
// an address makes it ready again; stopp and rmp leave no marker.
func TestContainerdHoldsRunpUntilTheAgentPrograms(t *testing.T) {
	const delay = 1500 * time.Millisecond
	n, agent := cnitest.NewAgentNet(t, "containerd.conflist", delay, func(n *cnitest.TestNet, list map[string]any) {
		ipam := cnitest.Plugins(list)[0]["ipam"].(map[string]any)
		ipam["ranges"] = []any{[]any{map[string]any{"subnet": n.Prefix + "0/29"}}}
		n.Netready()["status"].(map[string]any)["confDir"] = n.ConfDir
	})
	// The node's network plugin ships its conflist without netready;
	// netready-install chains it in and copies the plugin, as the
	// DaemonSet does.
	entry := n.ShipWithoutNetready()
	bin := cnitest.PluginDir(t, "bridge", "host-local", "loopback", "portmap")
	cnitest.RunInstaller(t, "--conf-dir", n.ConfDir, "--bin-dir", bin, "--plugin-binary", filepath.Join(harness.BinDir, "netready"), "--config", string(entry))
	c := startCRI(t, n.ConfDir, bin)

	if ok, msg := c.NetworkReady(); !ok {
		t.Fatalf("NetworkReady=false before any pod: %s", msg)
	}

	start := time.Now()
	first, err := c.RunPod("web-0")
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	ip := c.PodIP(first)
	m := n.ReadMarker(first, "eth0")
	ev := agent.Visible("nftables", ip)
	if m.State != "ready" || m.ReadyAt.Before(time.Unix(0, ev.BeganAt)) || took < delay {
		t.Errorf("runp took %s, marker %s ready at %s; the agent programmed the pod at %s",
			took, m.State, m.ReadyAt.Format(time.StampMicro), time.Unix(0, ev.VisibleAt).Format(time.StampMicro))
	}
	if ip == "" || !strings.HasPrefix(ip, n.Prefix) || m.IPs[0] != ip+"/29" {
		t.Errorf("pod IP %q, marker IPs %v", ip, m.IPs)
	}
	if m.Pod.Name != "web-0" || m.Pod.Namespace != "default" || m.Pod.UID != "uid-web-0" {
		t.Errorf("marker pod = %+v, want default/web-0 from containerd's CNI_ARGS", m.Pod)
	}
	t.Logf("runp of web-0 took %s (agent delay %s), pod IP %s", took, delay, ip)

	pods := []string{first}
	for i := 1; i < 5; i++ {
		id, err := c.RunPod(fmt.Sprintf("web-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, id)
	}
	want := `netready: network "` + n.Name + `": IP pool exhausted (5 of 5 addresses in use)`
	harness.Eventually(t, "NetworkReady=false with netready's message", func() (bool, string) {
		ok, msg := c.NetworkReady()
		return !ok && strings.Contains(msg, want), fmt.Sprint(ok, " ", msg)
	})

	last := pods[len(pods)-1]
	if _, err := c.Crictl("stopp", last); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.MarkerPath(last, "eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker survived stopp (DEL with netns): %v", err)
	}
	if _, err := c.Crictl("rmp", last); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(n.MarkerPath(last, "eth0")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("marker back after rmp (DEL without netns): %v", err)
	}
	harness.Eventually(t, "NetworkReady=true once an address is free", func() (bool, string) {
		ok, msg := c.NetworkReady()
		return ok, msg
	})

	for _, id := range pods[:len(pods)-1] {
		c.Crictl("stopp", id)
		c.Crictl("rmp", id)
	}
	// What may stay is STATUS's pool count and the outcome journal of
	// fail-mode timeouts; no marker, and no temp file.
	poolCount := pool.CachePath(n.StateDir, n.Name)
	entries, _ := os.ReadDir(filepath.Join(n.StateDir, n.Name))
	var markers []string
	for _, e := range entries {
		if filepath.Join(n.StateDir, n.Name, e.Name()) != poolCount && !strings.HasPrefix(e.Name(), outcome.FileName) {
			markers = append(markers, e.Name())
		}
	}
	if len(markers) != 0 {
		t.Errorf("markers left after every pod was removed: %v", markers)
	}
}
