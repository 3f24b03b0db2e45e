//go:build integration

package runtimes

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/runtimes"
)

// loopbackAgent is an agent's health endpoint on loopback that can be
// stopped and started again on the same address.
type loopbackAgent struct {
	t    *testing.T
	addr string
	srv  *http.Server
	hits atomic.Int32 // health probes answered
}

func newLoopbackAgent(t *testing.T) *loopbackAgent {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &loopbackAgent{t: t, addr: l.Addr().String()}
	a.serve(l)
	t.Cleanup(a.stop)
	return a
}

func (a *loopbackAgent) serve(l net.Listener) {
	a.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.hits.Add(1) }), ReadHeaderTimeout: time.Second}
	go a.srv.Serve(l)
}

func (a *loopbackAgent) stop() { a.srv.Close() }

func (a *loopbackAgent) start() {
	l, err := net.Listen("tcp", a.addr)
	if err != nil {
		a.t.Fatal(err)
	}
	a.serve(l)
}

// holdsReady polls NetworkReady for d and fails the test at its first
// false: what a NotReady node would have cost every pod on it.
func holdsReady(t *testing.T, c *runtimes.CRI, what string, d time.Duration) {
	t.Helper()
	for start := time.Now(); time.Since(start) < d; time.Sleep(500 * time.Millisecond) {
		if ok, msg := c.NetworkReady(); !ok {
			t.Fatalf("%s: NetworkReady=false after %s: %s", what, time.Since(start).Round(time.Millisecond), msg)
		}
	}
}

// TestNodeStaysReadyForABlipOrATypo, under a real containerd (which runs
// STATUS on each CRI Status call, as kubelet polls it every 5 s): an
// agent outage of 15 s, shorter than the default status.failAfter of 30 s,
// and a typo in the netready entry each leave NetworkReady true, so the
// node stays Ready and its pods in their Services. The typo still fails
// ADD with code 7 naming the key, and leaves its message for the sidecar.
// An outage longer than failAfter does fail STATUS, saying for how long.
func TestNodeStaysReadyForABlipOrATypo(t *testing.T) {
	agent := newLoopbackAgent(t)
	n := cnitest.NewNet(t, "containerd.conflist", func(n *cnitest.TestNet, list map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
		n.Netready()["status"] = map[string]any{"agents": []any{map[string]any{"kind": "http", "url": "http://" + agent.addr + "/healthz"}}}
	})
	bin := cnitest.PluginDir(t, "bridge", "host-local", "loopback", "portmap")
	if err := os.Link(filepath.Join(harness.BinDir, "netready"), filepath.Join(bin, "netready")); err != nil {
		data, _ := os.ReadFile(filepath.Join(harness.BinDir, "netready"))
		os.WriteFile(filepath.Join(bin, "netready"), data, 0o755)
	}
	c := startCRI(t, n.ConfDir, bin)
	harness.Eventually(t, "NetworkReady=true with the agent up", func() (bool, string) { return c.NetworkReady() })
	if agent.hits.Load() == 0 {
		t.Fatal("containerd's CRI Status never ran netready's STATUS: the agent was never asked")
	}

	agent.stop()
	holdsReady(t, c, "a 15 s agent outage (failAfter 30s)", 15*time.Second)
	agent.start()

	// The operator's typo.
	n.Netready()["timout"] = "5s"
	n.Write()
	notePath := filepath.Join(n.StateDir, n.Name, notes.InvalidConfigFile)
	// Each poll is a CRI Status call, as kubelet's every 5 s: containerd
	// runs STATUS for it.
	harness.Eventually(t, "STATUS leaves the refused entry's note", func() (bool, string) {
		c.NetworkReady()
		data, err := os.ReadFile(notePath)
		return err == nil && strings.Contains(string(data), `unknown key "timout": did you mean "timeout"?`), string(data)
	})
	holdsReady(t, c, "a typo in the netready entry", 6*time.Second)
	if _, err := c.RunPod("typo"); err == nil || !strings.Contains(err.Error(), "timout") || !strings.Contains(err.Error(), "did you mean") {
		t.Errorf("runp with a typo in the entry = %v, want ADD's code 7 naming the key", err)
	}
	delete(n.Netready(), "timout")
	n.Write()
	harness.Eventually(t, "the note goes once the entry is fixed", func() (bool, string) {
		c.NetworkReady()
		_, err := os.Stat(notePath)
		return os.IsNotExist(err), ""
	})

	// A real outage, longer than failAfter, still fails STATUS.
	n.Netready()["status"].(map[string]any)["failAfter"] = "3s"
	n.Write()
	agent.stop()
	harness.Eventually(t, "NetworkReady=false once the agent has failed for failAfter", func() (bool, string) {
		ok, msg := c.NetworkReady()
		return !ok && strings.Contains(msg, "failing for") && strings.Contains(msg, agent.addr), msg
	})
	agent.start()
	harness.Eventually(t, "NetworkReady=true once the agent answers", func() (bool, string) { return c.NetworkReady() })
}
