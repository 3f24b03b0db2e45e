//go:build integration

package ovn

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
)

// The cross-node tests (issue #52): a server pod on node B behind an
// allow-list, as ovn-kubernetes renders an ingress NetworkPolicy (the
// server's port in a port group, an allow-related ACL for the clients'
// address set, a drop for the rest), and client pods created on node A
// whose first action, right after ADD returns, is one TCP connection to
// the server. B's ovn-controller is stopped (SIGSTOP) as each client
// starts and continued xnLag later: a lag that is deterministic but
// finite. While B lags it has neither the client's IP in the address set
// nor A's claim of the client's port, so the SYN is dropped on B.
const (
	xnSubnet   = "10.200.98.0/24"
	xnServerIP = "10.200.98.2"
	xnLag      = time.Second
	// xnWaitPods is how many clients the wait-on test starts.
	xnWaitPods    = 50
	xnControlPods = 10
	// xnBurst is how many clients each phase of the coalescing test
	// starts.
	xnBurst = 20
)

// firstConnections starts n clients in sequence, each (when lag) with B
// lagged, and returns how many first connections succeeded, the ADD
// times, the failures, and the pods.
func firstConnections(t *testing.T, b *agents.CrossNodeBed, list *libcni.NetworkConfigList, prefix string, firstIP, n int, lag bool) (ok int, adds []time.Duration, fails []string, pods []*libcni.RuntimeConf) {
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		one := func() {
			rt, took, err := b.Add(list, name, fmt.Sprintf("10.200.98.%d", firstIP+i))
			if err != nil {
				t.Fatalf("ADD %s: %v", name, err)
			}
			adds, pods = append(adds, took), append(pods, rt)
			if err := b.Connect(rt); err != nil {
				fails = append(fails, fmt.Sprintf("%s: %v", name, err))
				return
			}
			ok++
		}
		if lag {
			b.Lagged(xnLag, one)
		} else {
			one()
		}
	}
	return ok, adds, fails, pods
}

// TestCrossNodeControlOVN is the control: with today's ovn-kubernetes
// preset (ready once node A has installed the client's port) and node B
// lagging, every first connection to the server on B fails; the same pods
// connect once B caught up, so the window, not the datapath, failed them.
// Idle (no lag), it logs how many succeed.
func TestCrossNodeControlOVN(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	list := b.Chain(nil)
	idle, idleAdds, _, _ := firstConnections(t, b, list, "idle", 100, xnControlPods, false)
	t.Logf("idle, today's preset: %d of %d first connections across nodes succeeded (ADD %v)", idle, xnControlPods, roundAll(idleAdds))
	ok, adds, fails, pods := firstConnections(t, b, list, "web", 10, xnControlPods, true)
	t.Logf("B lagged %s, today's preset: %d of %d first connections across nodes succeeded (ADD %v); failed: %v", xnLag, ok, xnControlPods, roundAll(adds), fails)
	if ok != 0 {
		t.Errorf("with B lagged, %d of %d first connections succeeded: the lag opens no window, so the control proves nothing", ok, xnControlPods)
	}
	b.OVN.Nbctl("--wait=hv", "sync")
	later := 0
	for _, rt := range pods {
		if b.Connect(rt) == nil {
			later++
		}
	}
	if later != xnControlPods {
		t.Errorf("once B caught up only %d of %d control pods connect: the datapath, not the window, fails them", later, xnControlPods)
	}
}

// TestCrossNodeWaitOVN: with crossNode on (onTimeout fail), every one of
// xnWaitPods clients, each started while node B lags, reaches the server
// on B with its first connection: ADD returns only once B's
// Chassis_Private.nb_cfg has reached the barrier raised after A installed
// the client's port. A client outside the allow-list is ready and still
// refused, so the policy is real.
func TestCrossNodeWaitOVN(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	list := b.Chain(map[string]any{"timeout": "5s", "nbSocket": b.OVN.NB, "sbSocket": b.OVN.SB})
	before := nbCfg(b)
	ok, adds, fails, pods := firstConnections(t, b, list, "web", 10, xnWaitPods, true)
	slices.Sort(adds)
	t.Logf("B lagged %s, crossNode on: %d of %d first connections across nodes succeeded; ADD p50 %s max %s; nb_cfg raised %d times",
		xnLag, ok, xnWaitPods, adds[len(adds)/2].Round(time.Millisecond), adds[len(adds)-1].Round(time.Millisecond), nbCfg(b)-before)
	if ok != xnWaitPods {
		t.Errorf("with crossNode on, %d of %d first connections failed: %v", xnWaitPods-ok, xnWaitPods, fails)
	}
	for _, rt := range pods[:3] {
		r, found := agents.CrossNodeResult(b.Marker(rt))
		if !found || !r.Ready || strings.Contains(r.Target, "left out") {
			t.Errorf("marker of %s: cross-node result %+v (found %v), want ready with no chassis left out", rt.ContainerID, r, found)
		}
	}
	deny, _, err := b.Add(list, "deny-0", "10.200.98.200")
	if err != nil {
		t.Fatalf("ADD deny-0: %v", err)
	}
	if err := b.Connect(deny); err == nil {
		t.Error("a pod outside the allow-list reached the server: the policy is not enforced, so the allows prove nothing")
	}
}

// TestCrossNodeStalledChassisLeftOut: a chassis frozen for good never
// holds pods: the first ADD leaves it out after crossNode.stallAfter and
// names it in the marker; the next ADD leaves it out at once, as it is
// still behind the barrier the first one raised.
func TestCrossNodeStalledChassisLeftOut(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	const stall = 2 * time.Second
	list := b.Chain(map[string]any{"timeout": "4s", "stallAfter": stall.String(), "nbSocket": b.OVN.NB, "sbSocket": b.OVN.SB})
	b.OVN.B.Freeze(true)
	defer b.OVN.B.Freeze(false)
	for i, limit := range []time.Duration{4 * time.Second, stall - 500*time.Millisecond} {
		name := fmt.Sprintf("web-%d", i)
		rt, took, err := b.Add(list, name, fmt.Sprintf("10.200.98.%d", 210+i))
		if err != nil {
			t.Fatalf("ADD %s with B frozen: %v", name, err)
		}
		r, found := agents.CrossNodeResult(b.Marker(rt))
		t.Logf("ADD %s with B frozen took %s: %+v", name, took.Round(time.Millisecond), r)
		if !found || !r.Ready || !strings.Contains(r.Target, "left out, stalled: "+b.OVN.B.Name) {
			t.Errorf("marker of %s: cross-node result %+v, want ready naming %s as left out", name, r, b.OVN.B.Name)
		}
		if took > limit {
			t.Errorf("ADD %s took %s, over %s", name, took, limit)
		}
	}
	log, _ := os.ReadFile(b.Log)
	if !strings.Contains(string(log), "stalled chassis left out") {
		t.Errorf("the plugin's log does not name the chassis left out:\n%s", harness.Tail(string(log), 10))
	}
}

// TestCrossNodeLogNamesEveryChassisAwaited: a wait that ends with a chassis
// still awaited (proceed, stallAfter past the wait's timeout) names it in
// ADD's log in full, whatever the marker's reason cuts.
func TestCrossNodeLogNamesEveryChassisAwaited(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	list := b.ChainWith(map[string]any{"onTimeout": "proceed", "crossNode": map[string]any{"timeout": "1s", "stallAfter": "10s", "nbSocket": b.OVN.NB, "sbSocket": b.OVN.SB}})
	b.OVN.B.Freeze(true)
	defer b.OVN.B.Freeze(false)
	rt, _, err := b.Add(list, "web-awaited", "10.200.98.220")
	if err != nil {
		t.Fatalf("ADD with B frozen under proceed: %v", err)
	}
	if r, found := agents.CrossNodeResult(b.Marker(rt)); !found || r.Ready {
		t.Errorf("cross-node result %+v, want not ready with B frozen", r)
	}
	log, _ := os.ReadFile(b.Log)
	line := harness.GrepLines(string(log), "chassis not at the barrier")
	if !strings.Contains(line, b.OVN.B.Name) {
		t.Errorf("the plugin's log does not name %s as awaited:\n%s", b.OVN.B.Name, harness.Tail(string(log), 10))
	}
}

// nbCfg is NB_Global.nb_cfg.
func nbCfg(b *agents.CrossNodeBed) int {
	var n int
	fmt.Sscan(strings.TrimSpace(b.OVN.Nbctl("get", "NB_Global", ".", "nb_cfg")), &n)
	return n
}

// TestCrossNodeRaisesCoalesceOVN: raises of the barrier are paced
// cluster-wide. xnBurst clients started at once, then xnBurst started one
// after another at 20/s, each phase while node B lags, raise
// NB_Global.nb_cfg at most about once per crossNode.raiseInterval (the
// default) over the time the phase takes, where pods started one after
// another used to raise once each; and every first connection still
// succeeds.
func TestCrossNodeRaisesCoalesceOVN(t *testing.T) {
	b := agents.StartCrossNodeBed(t, xnSubnet, xnServerIP)
	list := b.Chain(map[string]any{"timeout": "5s", "nbSocket": b.OVN.NB, "sbSocket": b.OVN.SB})
	for _, phase := range []struct {
		name    string
		gap     time.Duration
		firstIP int
	}{
		{"at once", 0, 10},
		{"at 20/s", 50 * time.Millisecond, 10 + xnBurst},
	} {
		before := nbCfg(b)
		start := time.Now()
		var mu sync.Mutex
		var adds []time.Duration
		var fails []string
		b.Lagged(xnLag, func() {
			var wg sync.WaitGroup
			for i := range xnBurst {
				time.Sleep(phase.gap)
				wg.Go(func() {
					name := fmt.Sprintf("c%d-%d", phase.firstIP, i)
					rt, took, err := b.Add(list, name, fmt.Sprintf("10.200.98.%d", phase.firstIP+i))
					if err == nil {
						err = b.Connect(rt)
					}
					mu.Lock()
					defer mu.Unlock()
					adds = append(adds, took)
					if err != nil {
						fails = append(fails, fmt.Sprintf("%s: %v", name, err))
					}
				})
			}
			wg.Wait()
		})
		took := time.Since(start)
		raises := nbCfg(b) - before
		bound := int(took/config.DefaultRaiseInterval) + 3
		slices.Sort(adds)
		t.Logf("%s, B lagged %s: %d pods in %s raised nb_cfg %d times (bound %d); ADD p50 %s max %s; %d first connections failed",
			phase.name, xnLag, xnBurst, took.Round(time.Millisecond), raises, bound,
			adds[len(adds)/2].Round(time.Millisecond), adds[len(adds)-1].Round(time.Millisecond), len(fails))
		if raises < 1 || raises > bound {
			t.Errorf("%s: %d pods raised nb_cfg %d times in %s, want 1 to %d (one per raiseInterval %s, and a few)",
				phase.name, xnBurst, raises, took.Round(time.Millisecond), bound, config.DefaultRaiseInterval)
		}
		if len(fails) > 0 {
			t.Errorf("%s: %d of %d ADDs or first connections failed: %v", phase.name, len(fails), xnBurst, fails)
		}
	}
}
