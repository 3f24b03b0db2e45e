//go:build integration

package cilium

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
)

// xnCiliumPods is how many clients each arm of the Cilium control starts.
const xnCiliumPods = 10

// TestCrossNodeControlCilium is issue #52's control on two real
// cilium-agents in native routing: with netready's cilium preset (ready
// once node A's own agent has programmed the client), a client's first
// connection to the server on node B fails while B's agent has not yet
// learned the client's CiliumEndpoint: B's ipcache has no identity for
// the client's IP, so B's policy sees it as the world and drops the SYN.
// B's agent is stopped (SIGSTOP) while each client starts: a lag that is
// deterministic. The same clients connect once B caught up, so the
// window, not the datapath, failed them. Idle (no lag), it logs how many
// first connections succeed and when B's ipcache had each client.
func TestCrossNodeControlCilium(t *testing.T) {
	b := agents.StartCiliumCrossNodeBed(t)
	list := b.Chain(map[string]any{"type": "netready", "stateDir": b.State, "timeout": "20s", "onTimeout": "fail", "logFile": b.Log,
		"checks": []any{map[string]any{"kind": "address"}, map[string]any{"kind": "http", "preset": "cilium", "url": "unix://" + b.A.Sock}}})
	// The first app=web pod allocates the identity, which B must learn
	// (and render into the server's policy) once; later clients share it.
	rt, ip, _, err := b.Add(list, "warm", "web")
	if err != nil {
		t.Fatalf("ADD warm: %v\n%s", err, b.A.Log(40))
	}
	learned(t, b, ip, 30*time.Second)
	if err := b.Connect(rt); err != nil {
		t.Fatalf("the first client cannot reach the server on %s even after B learned it: %v\nA:\n%s\nB:\n%s", agents.CiliumNodeB, err, b.A.Log(30), b.B.Log(30))
	}

	idle, fails, lags := 0, []string{}, []time.Duration{}
	for i := range xnCiliumPods {
		rt, ip, _, err := b.Add(list, fmt.Sprintf("idle-%d", i), "web")
		returned := time.Now()
		if err != nil {
			t.Fatalf("ADD idle-%d: %v", i, err)
		}
		if err := b.Connect(rt); err != nil {
			fails = append(fails, fmt.Sprintf("idle-%d: %v", i, err))
		} else {
			idle++
		}
		lags = append(lags, learned(t, b, ip, 30*time.Second).Sub(returned))
	}
	slices.Sort(lags)
	t.Logf("idle, today's cilium preset: %d of %d first connections across nodes succeeded; B's ipcache had the client p50 %s, max %s after ADD returned (polled every 5 ms); failed: %v",
		idle, xnCiliumPods, harness.Ms(harness.Percentile(lags, .5)), harness.Ms(harness.Percentile(lags, 1)), fails)

	ok, fails := 0, nil
	var pods []*libcni.RuntimeConf
	var ips []string
	for i := range xnCiliumPods {
		b.Frozen(func() {
			rt, ip, _, err := b.Add(list, fmt.Sprintf("web-%d", i), "web")
			if err != nil {
				t.Fatalf("ADD web-%d: %v", i, err)
			}
			pods, ips = append(pods, rt), append(ips, ip)
			if err := b.Connect(rt); err != nil {
				fails = append(fails, fmt.Sprintf("web-%d: %v", i, err))
				return
			}
			ok++
		})
	}
	t.Logf("B's agent stopped while each client started, today's cilium preset: %d of %d first connections across nodes succeeded; failed: %v", ok, xnCiliumPods, fails)
	if ok != 0 {
		t.Errorf("with B's agent stopped, %d of %d first connections succeeded: the lag opens no window, so the control proves nothing", ok, xnCiliumPods)
	}
	later := 0
	for i, rt := range pods {
		learned(t, b, ips[i], 30*time.Second)
		if b.Connect(rt) == nil {
			later++
		}
	}
	if later != xnCiliumPods {
		t.Errorf("once B learned them only %d of %d control pods connect: the datapath, not the window, fails them", later, xnCiliumPods)
	}
}

// learned waits until B's ipcache holds ip with an identity other than
// the world's (2) and returns when it first saw it.
func learned(t *testing.T, b *agents.CiliumCrossNodeBed, ip string, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		id, err := b.B.Identity(ip)
		if err == nil && id > 2 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's ipcache has no identity for %s after %s (last: %d, %v)\n%s", agents.CiliumNodeB, ip, limit, id, err, b.B.Log(30))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
