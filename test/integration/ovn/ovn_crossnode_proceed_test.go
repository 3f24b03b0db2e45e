//go:build integration

package ovn

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/test/harness/agents"
)

// proceedChain is the bed's chain with onTimeout "proceed" and a
// crossNode whose timeout (500ms) is shorter than B's freeze, so that ADD
// returns with B still behind and the sidecar's re-check goes on.
func proceedChain(b *agents.CrossNodeBed, stallAfter time.Duration) *libcni.NetworkConfigList {
	return b.ChainWith(map[string]any{"onTimeout": "proceed",
		"crossNode": map[string]any{"timeout": "500ms", "stallAfter": stallAfter.String(), "nbSocket": b.OVN.NB, "sbSocket": b.OVN.SB}})
}

// addPendingOnB runs ADD for a client while B is frozen, and checks that
// it returned with a pending marker whose cross-node result names B.
func addPendingOnB(t *testing.T, b *agents.CrossNodeBed, list *libcni.NetworkConfigList, name, ip string) (*libcni.RuntimeConf, *marker.Marker) {
	t.Helper()
	rt, took, err := b.Add(list, name, ip)
	if err != nil {
		t.Fatalf("ADD %s with B frozen, onTimeout proceed: %v", name, err)
	}
	m := b.Marker(rt)
	r, found := agents.CrossNodeResult(m)
	t.Logf("ADD %s with B frozen took %s: %s, cross-node %+v", name, took.Round(time.Millisecond), m.State, r)
	if m.State != marker.StatePending || m.Pending == nil || m.Pending.CrossNode == nil || !found || r.Ready || !strings.Contains(r.Why, b.OVN.B.Name) {
		t.Fatalf("marker of %s: %s, pending %+v, cross-node %+v; want pending, carrying crossNode, its cross-node result naming %s", name, m.State, m.Pending, r, b.OVN.B.Name)
	}
	if took > 5*time.Second {
		t.Errorf("ADD %s took %s with crossNode.timeout 500ms", name, took)
	}
	return rt, m
}

// recheck is one re-check of a pending marker, run as the sidecar runs
// it (pending.Recheck on the real marker store), in the background.
type recheck struct {
	mu   sync.Mutex
	last *marker.Marker // its latest progress
	done chan error
	got  *marker.Marker
}

func startRecheck(t *testing.T, b *agents.CrossNodeBed, m *marker.Marker) *recheck {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rc := &recheck{done: make(chan error, 1)}
	// The sidecar's schedule (pkg/conditions), with shorter rounds so
	// that several run while B is frozen.
	sched := pending.Schedule{Round: 2 * time.Second, Patience: 10 * time.Minute, MaxGap: time.Minute}
	go func() {
		got, err := pending.Recheck(ctx, pending.Inputs{Store: marker.Store{Dir: b.State}}, m, sched, func(p *marker.Marker) {
			rc.mu.Lock()
			defer rc.mu.Unlock()
			rc.last = p
		})
		rc.got = got
		rc.done <- err
	}()
	return rc
}

// wait is the re-check's end, within limit.
func (rc *recheck) wait(t *testing.T, limit time.Duration) *marker.Marker {
	t.Helper()
	select {
	case err := <-rc.done:
		if err != nil {
			t.Fatalf("re-check = %v, want the marker written ready", err)
		}
		return rc.got
	case <-time.After(limit):
		t.Fatalf("the re-check did not end within %s", limit)
		return nil
	}
}

// TestCrossNodeProceedIsReadyOnlyOnceTheLaggingNodeLearnedThePod: under
// onTimeout "proceed", ADD returns with node B frozen (its cross-node
// timeout, 500ms, is shorter than the freeze), leaving the marker pending
// and naming B. The sidecar's re-check, whose local checks hold at once,
// keeps it pending while B stays frozen (for less than stallAfter), and
// writes it ready once B continues and reaches the barrier; the pod's
// first connection to the server on B then succeeds.
func TestCrossNodeProceedIsReadyOnlyOnceTheLaggingNodeLearnedThePod(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	const stall, frozenFor = 8 * time.Second, 3 * time.Second
	list := proceedChain(b, stall)
	b.OVN.B.Freeze(true)
	frozen := true
	defer func() {
		if frozen {
			b.OVN.B.Freeze(false)
		}
	}()
	rt, m := addPendingOnB(t, b, list, "web-0", "10.200.98.220")
	rc := startRecheck(t, b, m)

	time.Sleep(frozenFor)
	select {
	case err := <-rc.done:
		t.Fatalf("the re-check ended (%v, marker %+v) while B was frozen, want it still waiting", err, rc.got)
	default:
	}
	if got := b.Marker(rt); got.State != marker.StatePending {
		t.Errorf("marker with B frozen for %s (stallAfter %s): %s, want pending", frozenFor, stall, got.State)
	}
	rc.mu.Lock()
	last := rc.last
	rc.mu.Unlock()
	r, found := marker.CheckResult{}, false
	if last != nil {
		r, found = agents.CrossNodeResult(last)
	}
	if !found || r.Ready || !strings.Contains(r.Why, b.OVN.B.Name) {
		t.Errorf("the re-check's progress with B frozen: cross-node %+v (found %v), want not ready, naming %s", r, found, b.OVN.B.Name)
	}

	b.OVN.B.Freeze(false)
	frozen = false
	got := rc.wait(t, 20*time.Second)
	r, found = agents.CrossNodeResult(got)
	t.Logf("re-check after B continued: %s, cross-node %+v", got.State, r)
	if got.State != marker.StateReady || !found || !r.Ready || strings.Contains(r.Target, "left out") {
		t.Errorf("re-check's marker %s, cross-node %+v; want ready, no chassis left out", got.State, r)
	}
	if onDisk := b.Marker(rt); onDisk.State != marker.StateReady {
		t.Errorf("marker on disk after the re-check: %s, want ready", onDisk.State)
	}
	if err := b.Connect(rt); err != nil {
		t.Errorf("the first connection once the marker is ready: %v", err)
	}
}

// TestCrossNodeProceedLeavesAFrozenNodeOutAfterStallAfter: with node B
// frozen for good, the re-check of a pending marker does not wait for B
// forever: once B has been behind the barrier for stallAfter (counted from
// ADD's barrier, which ADD noted in the network's folder), the marker is
// written ready, naming B as left out.
func TestCrossNodeProceedLeavesAFrozenNodeOutAfterStallAfter(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	const stall = 3 * time.Second
	list := proceedChain(b, stall)
	b.OVN.B.Freeze(true)
	defer b.OVN.B.Freeze(false)
	start := time.Now()
	rt, m := addPendingOnB(t, b, list, "web-0", "10.200.98.221")
	got := startRecheck(t, b, m).wait(t, 20*time.Second)
	took := time.Since(start)
	r, found := agents.CrossNodeResult(got)
	t.Logf("re-check with B frozen for good: %s after %s, cross-node %+v", got.State, took.Round(time.Millisecond), r)
	if got.State != marker.StateReady || !found || !r.Ready || !strings.Contains(r.Target, "left out, stalled: "+b.OVN.B.Name) {
		t.Errorf("re-check's marker %s, cross-node %+v; want ready, naming %s as left out", got.State, r, b.OVN.B.Name)
	}
	// The stall counts from a barrier raised after ADD began.
	if took < stall {
		t.Errorf("ready %s after ADD began, before stallAfter %s: B was left out early", took, stall)
	}
	if onDisk := b.Marker(rt); onDisk.State != marker.StateReady {
		t.Errorf("marker on disk after the re-check: %s, want ready", onDisk.State)
	}
}
