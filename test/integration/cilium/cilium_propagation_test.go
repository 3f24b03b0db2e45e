//go:build integration

package cilium

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/kube"
)

// propagation is what node B's sidecar exported of the meter.
type propagation struct {
	count, upTo500ms           uint64
	busy, timeout, agentFailed float64
}

// TestCiliumPropagationIsMeasuredOnTheOtherNode is issue #52's measured
// propagation on two real cilium-agents: the real sidecar of node B,
// selected by its Node's label, with the RBAC of
// components/cilium-propagation (list and watch on CiliumEndpoints),
// observes once each pod started on node A after it began (not its own
// node's pods), as the time from its receiving the pod's CiliumEndpoint
// to B's agent's ipcache mapping the pod's IP to its identity; and with
// B's agent frozen while a pod starts on A, it observes the lag, above
// 0.5 s: the meter measures something that could fail.
func TestCiliumPropagationIsMeasuredOnTheOtherNode(t *testing.T) {
	b := agents.StartCiliumCrossNodeBed(t)
	listen := b.StartMeter(t)

	list := b.Chain(nil)
	const onA = 5
	for i := range onA {
		if _, _, _, err := b.Add(list, fmt.Sprintf("prop-%d", i), "web"); err != nil {
			t.Fatalf("ADD prop-%d on %s: %v\n%s", i, agents.CiliumNodeA, err, b.A.Log(40))
		}
	}
	// A pod on B itself is B's agent's own: not measured.
	cniB := b.B.CNI(t, filepath.Join(t.TempDir(), "b"))
	if _, _, err := b.B.AddPod(t, cniB, list, "prop-on-b", "web"); err != nil {
		t.Fatalf("ADD prop-on-b on %s: %v\n%s", agents.CiliumNodeB, err, b.B.Log(40))
	}
	waitObserved(t, listen, onA)
	time.Sleep(2 * time.Second) // nothing more comes: no pod counted twice, B's not at all
	got := scrapePropagation(t, listen)
	if got.count != onA {
		t.Errorf("node B observed %d propagations, want %d (the pods started on A)", got.count, onA)
	}
	t.Logf("after %d pods on A: %+v", onA, got)

	b.Frozen(func() {
		if _, _, _, err := b.Add(list, "prop-frozen", "web"); err != nil {
			t.Errorf("ADD prop-frozen on %s: %v\n%s", agents.CiliumNodeA, err, b.A.Log(40))
			return
		}
		// Published while B is frozen: B's sidecar has it, B's agent not.
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			if _, _, identity, ok := b.CiliumEndpoint("prop-frozen"); ok && identity > 5 {
				break
			}
			if time.Since(start) > 20*time.Second {
				t.Errorf("prop-frozen's CiliumEndpoint not published within 20 s")
				return
			}
		}
		time.Sleep(1500 * time.Millisecond)
	})
	got = waitObserved(t, listen, onA+1)
	t.Logf("after prop-frozen: %+v", got)
	if got.count != onA+1 || got.count-got.upTo500ms < 1 {
		t.Errorf("after a pod started on A while B's agent was frozen: %d observations, %d of them above 0.5 s; want %d, at least 1 above 0.5 s", got.count, got.count-got.upTo500ms, onA+1)
	}
	if got.busy+got.timeout+got.agentFailed != 0 {
		t.Errorf("unmeasured: busy %v, timeout %v, agent %v; want none", got.busy, got.timeout, got.agentFailed)
	}
}

// waitObserved waits up to 45 s for the sidecar at listen to have
// observed at least n propagations.
func waitObserved(t *testing.T, listen string, n uint64) propagation {
	t.Helper()
	var got propagation
	for start := time.Now(); time.Since(start) < 45*time.Second; time.Sleep(200 * time.Millisecond) {
		if got = scrapePropagation(t, listen); got.count >= n {
			return got
		}
	}
	t.Fatalf("node B's sidecar observed %d propagations within 45 s, want %d: %+v", got.count, n, got)
	return got
}

// scrapePropagation reads the meter's series from the sidecar's /metrics.
func scrapePropagation(t *testing.T, listen string) propagation {
	t.Helper()
	h := kube.ScrapeHistogram(t, listen, "netready_cilium_propagation_seconds")
	p := propagation{count: h.Count, upTo500ms: h.UpTo(0.5)}
	text := kube.MetricsText(t, listen)
	const unmeasured = "netready_cilium_propagation_unmeasured_total"
	p.busy = float64(kube.SumSeries(text, unmeasured, `reason="busy"`))
	p.timeout = float64(kube.SumSeries(text, unmeasured, `reason="timeout"`))
	p.agentFailed = float64(kube.SumSeries(text, unmeasured, `reason="agent"`))
	return p
}
