//go:build integration

package node

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness/kube"
)

// The first-packet test's pod network: bigger than the node's /28, so that
// 100 pods start at once.
const (
	fpSubnet  = "10.200.92.0/25"
	fpGateway = "10.200.92.1"
	// fpDelay: the stand-in agent allows a pod's IP this long after
	// host-local allocated it. fpClientTimeout: the client's one connect
	// (SYN and the kernel's retransmits at 1 and 3 s) gives up after this:
	// long enough that a client the node leaves without CPU for a while
	// still connects once allowed, and short enough that a control client
	// (started 6-12 s after allocation) gives up well before fpDelay.
	fpDelay         = 25 * time.Second
	fpClientTimeout = 5 * time.Second
)

// strictAgent stands in for a default-deny policy agent (kube-network-
// policies' pod-IP sets, a strict-mode agent): real nftables drops TCP
// from pod IPs to the server's port unless the IP is in its set, and it
// adds a pod's IP fpDelay after host-local allocates it, removing it when
// the address is released.
type strictAgent struct {
	dir      string // host-local's data folder of the network
	stateDir string // netready's stateDir
	mu       sync.Mutex
	// added: IP -> when the nft call that put it into the set began. The
	// kernel commits the element before nft exits (about 150 ms later
	// under load), so only a time before the call's start proves that a
	// pod went ahead of the agent.
	added   map[string]time.Time
	pending map[string]bool
	// leases: every allocation seen, newest last.
	leases []lease
	// stopped: the test is over; timers still pending do nothing.
	stopped atomic.Bool
	// failures: nft calls that failed, for the test to report; a timer
	// may fire after the test, when its *testing.T must not be used.
	failures []string
}

// lease is one allocation of an IP as the agent saw it, and the readyAt of
// the marker netready wrote for it, if any.
type lease struct {
	ip                      string
	allocated, added, ready time.Time
}

func startStrictAgent(t *testing.T, ipamDir, stateDir string, port int) *strictAgent {
	rules := fmt.Sprintf(`table inet nrfp {
  set allowed4 { type ipv4_addr; }
  chain input {
    type filter hook input priority -10; policy accept;
    ip saddr %s tcp dport %d ip saddr != @allowed4 drop
  }
}
`, fpSubnet, port)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", "nrfp").Run() })
	a := &strictAgent{dir: ipamDir, stateDir: stateDir, added: map[string]time.Time{}, pending: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { a.stopped.Store(true); cancel(); <-done })
	go func() { defer close(done); a.run(ctx) }()
	return a
}

// run follows host-local's allocation files every 10 ms, and netready's
// markers every 500 ms (their readyAt is in the file).
func (a *strictAgent) run(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		if i%50 == 0 {
			a.readMarkers()
		}
		entries, _ := os.ReadDir(a.dir)
		live := map[string]bool{}
		for _, e := range entries {
			if ip := net.ParseIP(e.Name()); ip != nil && ip.To4() != nil {
				live[e.Name()] = true
			}
		}
		a.mu.Lock()
		for ip := range live {
			if _, ok := a.added[ip]; !ok && !a.pending[ip] {
				a.pending[ip] = true
				a.leases = append(a.leases, lease{ip: ip, allocated: time.Now()})
				time.AfterFunc(fpDelay, func() { a.allow(ip) })
			}
		}
		for ip := range a.added {
			if !live[ip] {
				exec.Command("nft", "delete", "element", "inet", "nrfp", "allowed4", "{", ip, "}").Run()
				delete(a.added, ip)
			}
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (a *strictAgent) allow(ip string) {
	if a.stopped.Load() {
		return
	}
	began := time.Now()
	out, err := exec.Command("nft", "add", "element", "inet", "nrfp", "allowed4", "{", ip, "}").CombinedOutput()
	a.mu.Lock()
	if err != nil {
		a.failures = append(a.failures, fmt.Sprintf("nft add element %s: %v %s", ip, err, out))
	}
	a.added[ip] = began
	delete(a.pending, ip)
	for i := len(a.leases) - 1; i >= 0; i-- {
		if a.leases[i].ip == ip {
			a.leases[i].added = began
			break
		}
	}
	a.mu.Unlock()
}

// readMarkers notes each ready marker's readyAt on its IP's lease.
func (a *strictAgent) readMarkers() {
	paths, _ := filepath.Glob(filepath.Join(a.stateDir, "*", "*.json"))
	for _, p := range paths {
		m, err := marker.ReadFile(p)
		if err != nil || m.ReadyAt == nil || len(m.IPs) == 0 {
			continue
		}
		ip, _, _ := strings.Cut(m.IPs[0], "/")
		a.mu.Lock()
		for i := len(a.leases) - 1; i >= 0; i-- {
			if a.leases[i].ip == ip && !a.leases[i].allocated.After(m.CreatedAt.Time) {
				a.leases[i].ready = m.ReadyAt.Time
				break
			}
		}
		a.mu.Unlock()
	}
}

// leaseAt returns ip's lease that was allocated last before at.
func (a *strictAgent) leaseAt(ip string, at time.Time) (lease, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.leases) - 1; i >= 0; i-- {
		if l := a.leases[i]; l.ip == ip && !l.allocated.After(at) {
			return l, true
		}
	}
	return lease{}, false
}

// reportFailures fails t for each nft call that failed since the last
// report.
func (a *strictAgent) reportFailures(t testing.TB) {
	a.mu.Lock()
	f := a.failures
	a.failures = nil
	a.mu.Unlock()
	for _, msg := range f {
		// On stdout too: CI's summary keeps the test's own prints.
		fmt.Println("first packet, the stand-in agent: " + msg)
		t.Error("the stand-in agent: " + msg)
	}
}

func (a *strictAgent) addedAt(ip string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.added[ip]
	return at, ok
}

// TestFirstConnectionSucceedsForEveryPod: the promise itself, on the real node. A strict policy
// agent (real nftables) drops a pod's traffic until fpDelay after its
// address is allocated; each client pod's first action is one TCP
// connection to a server on the node. In one run, with the same delay:
//   - without netready, the first connection fails for most pods (the
//     control: the race is real here);
//   - with netready in fail mode (an nftables set check), 100 of 100 pods
//     connect on their first try;
//   - in proceed mode with the gate, no gated pod is Ready before its IP is
//     in the agent's set, while ungated pods beside them are (the control
//     of that assertion).
func TestFirstConnectionSucceedsForEveryPod(t *testing.T) {
	n := startClientNode(t)
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	agent := startStrictAgent(t, n.Path("ipam/nr-fp"), n.Path("state"), port)
	check := `{"kind": "address"}, {"kind": "nftables", "family": "inet", "table": "nrfp", "set": "allowed4"}`
	entry := func(timeout, onTimeout string) string {
		return fmt.Sprintf(`{"type": "netready", "timeout": %q, "onTimeout": %q, "stateDir": %q, "logFile": %q, "checks": [%s]}`,
			timeout, onTimeout, n.Path("state"), n.Path("netready.log"), check)
	}
	var summary []string

	t.Run("without netready: the control", func(t *testing.T) {
		n.T = t
		writeFirstPacketConflist(n, "")
		const pods = 20
		connected, text := summarize(runClients(n, agent, "bare", pods, port))
		summary = append(summary, "without netready: "+text)
		if connected*2 > pods {
			t.Errorf("%d of %d pods connected without netready: the agent's delay did not make the race show, so the test proves nothing", connected, pods)
		}
	})

	t.Run("onTimeout fail: every first connection succeeds", func(t *testing.T) {
		n.T = t
		writeFirstPacketConflist(n, entry("90s", "fail"))
		const pods = 100
		start := time.Now()
		writes := n.PodStatusWrites()
		results := runClients(n, agent, "fail", pods, port)
		writes = n.PodStatusWrites() - writes
		connected, text := summarize(results)
		summary = append(summary, fmt.Sprintf("netready, onTimeout fail: %s (%.0f s for all)", text, time.Since(start).Seconds()),
			fmt.Sprintf("kubelet's pods/status writes per pod, start to completion (no sidecar runs in this phase): %.2f (%d for %d pods)", float64(writes)/pods, writes, pods))
		if connected != pods {
			t.Errorf("%d of %d pods connected on the first try with netready in fail mode", connected, pods)
		}
		for _, r := range results {
			if !r.connected || !r.allowed {
				// On stdout too: CI's summary keeps the test's own prints.
				msg := fmt.Sprintf("%s (%s): connected %v, started %s after allocation, the agent had allowed its IP by then: %v; %s",
					r.name, r.ip, r.connected, r.sinceAlloc, r.allowed, r.msg)
				fmt.Println("first packet, fail mode: " + msg)
				t.Error(msg)
			}
		}
	})

	t.Run("onTimeout proceed with the gate: never Ready before the agent allows the IP", func(t *testing.T) {
		n.T = t
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// The sidecar as a process on the node, as the node's admin.
		kube.StartSidecarProc(t, n.Path("pki/admin.kubeconfig"), n.Path("state"), kube.NodeName, "--condition-type", kube.NodeConditionType, "--cni-conf-dir", "")
		writeFirstPacketConflist(n, entry("1s", "proceed"))
		type seen struct {
			at  time.Time
			ltt time.Time
			ip  string
		}
		var mu sync.Mutex
		ready := map[string]seen{}
		w, err := n.Admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
						mu.Lock()
						if _, ok := ready[p.Name]; !ok {
							ready[p.Name] = seen{time.Now(), c.LastTransitionTime.Time, p.Status.PodIP}
						}
						mu.Unlock()
					}
				}
			}
		}()
		// The ungated pods first, so that they are Ready well within the
		// agent's delay even on a slow node.
		const gated, ungated = 20, 5
		var names []string
		for i := range gated + ungated {
			g := i >= ungated
			name := fmt.Sprintf("ungated-%d", i)
			if g {
				name = fmt.Sprintf("gated-%d", i-ungated)
			}
			names = append(names, name)
			n.CreatePod(clientPod(name, port, g, true))
		}
		n.WaitFor("every pod Ready", 3*time.Minute, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(ready) == len(names)
		})
		early := map[bool]int{}
		for _, name := range names {
			mu.Lock()
			s := ready[name]
			mu.Unlock()
			allowed, ok := agent.addedAt(s.ip)
			// Ready before the IP was allowed: seen before it, or its
			// transition's second ended before it.
			before := !ok || s.at.Before(allowed) || !s.ltt.Add(time.Second).After(allowed)
			isGated := strings.HasPrefix(name, "gated-")
			if before {
				early[isGated]++
			}
			if before && isGated {
				t.Errorf("%s (%s) was Ready at %s, before the agent allowed its IP at %s", name, s.ip, s.at.Format(time.StampMilli), allowed.Format(time.StampMilli))
			}
		}
		summary = append(summary, fmt.Sprintf("netready, onTimeout proceed with the gate: %d of %d gated pods Ready before their IP was allowed; ungated beside them: %d of %d",
			early[true], gated, early[false], ungated))
		if early[false] == 0 {
			t.Errorf("no ungated pod was Ready before its IP was allowed: the comparison cannot tell a gated pod's wait")
		}
		cancel()
		clearPods(n, context.Background())
		agent.reportFailures(t)
	})
	n.T = t
	// The counts are the test's result: printed, so that CI shows them.
	fmt.Println("\nFirst packet on the real node:")
	for _, s := range summary {
		fmt.Println("  " + s)
	}
}
