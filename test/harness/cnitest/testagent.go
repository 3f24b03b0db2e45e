//go:build integration

package cnitest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
)

// TestAgent is a running netready-testagent.
type TestAgent struct {
	t        testing.TB
	PodsFile string
	Chain    string
	Table    string
	HTTP     string // host:port
	Sock     string
	Calico   string

	mu     sync.Mutex
	pods   map[string]map[string]string
	events []AgentEvent
	cond   *sync.Cond
	// writeMu orders the writes of PodsFile: two ADDs at once must not
	// rename an older map over a newer one (or share the temp file).
	writeMu sync.Mutex
}

// AgentEvent is one line of the test agent's report.
type AgentEvent struct {
	Event       string `json:"event"`
	Source      string `json:"source"`
	IP          string `json:"ip"`
	ContainerID string `json:"containerID"`
	BeganAt     int64  `json:"beganAt"`
	VisibleAt   int64  `json:"visibleAt"`
	Error       string `json:"error"`
}

// NewAgentNet loads a conflist, points its policy checks at a fresh agent's
// unique chain, table, folder, port and socket, and starts the agent.
func NewAgentNet(t testing.TB, file string, delay time.Duration, edit func(*TestNet, map[string]any)) (*TestNet, *TestAgent) {
	t.Helper()
	dir := t.TempDir()
	a := &TestAgent{t: t, PodsFile: filepath.Join(dir, "pods.json"), Sock: filepath.Join(dir, "agent.sock"),
		Calico: filepath.Join(dir, "endpoint-status"), HTTP: "127.0.0.1:" + strconv.Itoa(harness.FreePort(t)),
		pods: map[string]map[string]string{}}
	a.cond = sync.NewCond(&a.mu)
	n := NewNet(t, file, func(n *TestNet, list map[string]any) {
		a.Chain, a.Table = "NR-"+n.ID, "nr"+n.ID
		if edit != nil {
			edit(n, list)
		}
		for _, c := range n.Netready()["checks"].([]any) {
			c := c.(map[string]any)
			switch c["kind"] {
			case "iptables":
				c["chain"] = a.Chain
			case "nftables":
				c["table"] = a.Table
			case "file":
				c["path"] = a.Calico
			case "http":
				if c["path"] != nil {
					c["url"] = "unix://" + a.Sock
				} else {
					c["url"] = "http://" + a.HTTP + "/ready?ip={{.IP}}"
				}
			}
		}
	})
	a.write()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, filepath.Join(harness.BinDir, "netready-testagent"),
		"--bridge", n.Bridge, "--ipam-dir", n.IPAMDir, "--pods", a.PodsFile, "--delay", delay.String(),
		"--iptables-chain", a.Chain, "--nft-table", a.Table, "--calico-dir", a.Calico,
		"--http", a.HTTP, "--unix", a.Sock)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		if err := cmd.Wait(); err != nil && ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
	})
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev AgentEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			if ev.Event == "started" {
				close(started)
				continue
			}
			a.mu.Lock()
			a.events = append(a.events, ev)
			a.cond.Broadcast()
			a.mu.Unlock()
		}
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not start")
	}
	return n, a
}

// SetPod tells the agent a container's pod and its programming delay.
func (a *TestAgent) SetPod(cid, namespace, name string, delay time.Duration) {
	a.mu.Lock()
	a.pods[cid] = map[string]string{"namespace": namespace, "name": name, "delay": delay.String()}
	a.mu.Unlock()
	a.write()
}

func (a *TestAgent) write() {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	a.mu.Lock()
	data, _ := json.Marshal(a.pods)
	a.mu.Unlock()
	tmp := a.PodsFile + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		a.t.Fatal(err)
	}
	os.Rename(tmp, a.PodsFile)
}

// Visible returns the agent's report of programming source for ip: it
// became visible after BeganAt and by VisibleAt. It waits up to 10 s.
func (a *TestAgent) Visible(source, ip string) AgentEvent {
	a.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		for _, ev := range a.events {
			if ev.Source == source && ev.IP == ip {
				if ev.Error != "" {
					a.t.Fatalf("agent could not program %s for %s: %s", source, ip, ev.Error)
				}
				return ev
			}
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("agent never programmed %s for %s", source, ip)
		}
		go func() { time.Sleep(100 * time.Millisecond); a.cond.Broadcast() }()
		a.cond.Wait()
	}
}

// PodArgs is CNI_ARGS naming the pod, as a runtime passes it.
func PodArgs(ns, name string) string {
	return "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + ns + ";K8S_POD_NAME=" + name + ";K8S_POD_UID=uid-" + name
}

// HTTPURL is the agent's loopback base URL as written in the conflist.
func (n *TestNet) HTTPURL() string {
	for _, c := range n.Netready()["checks"].([]any) {
		c := c.(map[string]any)
		if c["kind"] == "http" && c["path"] == nil {
			return strings.SplitN(c["url"].(string), "/ready", 2)[0]
		}
	}
	n.t.Fatal("no http check")
	return ""
}
