//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"github.com/google/nftables"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nftrule"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/publish"
)

// Benchmarks print figures measured in one run, side by side with a
// baseline measured in the same run. They assert nothing about time.
// Run with `make bench`.

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// timeVersion times one exec of a CNI plugin's VERSION, its start and
// no work: the baseline of every per-call goal. A failed exec fails the
// bench, so that a missing baseline cannot pass a goal.
func timeVersion(b testing.TB, bin string) time.Duration {
	b.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{"CNI_COMMAND=VERSION"}
	// No pipes: output copied by goroutines would be timed too.
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		b.Fatalf("%s VERSION: %v", bin, err)
	}
	return d
}

// poller is the baseline: what a fixed 200 ms polling loop (as
// ovn-kubernetes waits for its pod flows) would notice, in the same run.
type poller struct {
	mu      sync.Mutex
	pending map[string]time.Time // ip -> when first seen, zero while unseen
	seen    func(ip string) bool
}

func startPoller(ctx context.Context, seen func(string) bool) *poller {
	p := &poller{pending: map[string]time.Time{}, seen: seen}
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.mu.Lock()
			var todo []string
			for ip, at := range p.pending {
				if at.IsZero() {
					todo = append(todo, ip)
				}
			}
			p.mu.Unlock()
			for _, ip := range todo {
				if p.seen(ip) {
					p.mu.Lock()
					p.pending[ip] = time.Now()
					p.mu.Unlock()
				}
			}
		}
	}()
	return p
}

func (p *poller) watch(ip string) {
	p.mu.Lock()
	p.pending[ip] = time.Time{}
	p.mu.Unlock()
}

func (p *poller) seenAt(ip string) time.Time {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		p.mu.Lock()
		at := p.pending[ip]
		p.mu.Unlock()
		if !at.IsZero() {
			return at
		}
	}
	return time.Time{}
}

// listener is the floor of detection: the test process, already holding
// the source's event stream open, notes when each change arrives. It runs
// in the same run, under the same load as netready's ADDs.
type listener struct {
	mu   sync.Mutex
	seen map[string]time.Time
	// probed is when a read of the set, made on each element event,
	// first found the key (nftables only): the cost of confirming an event
	// by reading it back.
	probed map[string]time.Time
}

// startListener opens the stream for nftables (set elements) and file
// (the Calico folder), or returns nil for sources without events.
func startListener(ctx context.Context, b testing.TB, source string, a *testAgent) *listener {
	l := &listener{seen: map[string]time.Time{}, probed: map[string]time.Time{}}
	switch source {
	case "nftables":
		c, err := nftables.New()
		if err != nil {
			b.Fatal(err)
		}
		probe, err := nftables.New(nftables.AsLasting())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { probe.CloseLasting() })
		events := nftMonitor(ctx, b, c)
		go func() {
			for ev := range events {
				elems, ok := ev.Data.([]nftables.SetElement)
				if !ok || ev.Type != nftables.MonitorEventTypeNewSetElem {
					continue
				}
				for _, e := range elems {
					l.note(l.seen, net.IP(e.Key).String())
				}
				set, err := probe.GetSetByName(&nftables.Table{Name: a.Table, Family: nftables.TableFamilyINet}, "pods4")
				if err != nil {
					continue
				}
				held, err := probe.GetSetElements(set)
				if err != nil {
					continue
				}
				for _, e := range held {
					l.note(l.probed, net.IP(e.Key).String())
				}
			}
		}()
	case "iptables":
		// iptables-nft's rules are nftables rules: the pod's own rule, as
		// it arrives.
		listenNFTables(ctx, b, l)
	case "file":
		w, err := fsnotify.NewWatcher()
		if err != nil {
			b.Fatal(err)
		}
		if err := w.Add(a.Calico); err != nil {
			b.Fatal(err)
		}
		go func() {
			<-ctx.Done()
			w.Close()
		}()
		go func() {
			for ev := range w.Events {
				if ev.Has(fsnotify.Create) {
					l.note(l.seen, ev.Name)
				}
			}
		}()
	default:
		return nil
	}
	return l
}

// nftMonitor streams every nftables event in the host netns until ctx
// ends. Every object: google/nftables v0.3.0 delivers events on the
// generation message, which an object filter drops.
func nftMonitor(ctx context.Context, b testing.TB, c *nftables.Conn) <-chan *nftables.MonitorEvent {
	mon := nftables.NewMonitor()
	events, err := c.AddMonitor(mon)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		mon.Close()
	}()
	return events
}

// listenNFTables notes in l.seen, by IP, each set element and each rule (by
// the source address it compares) that nftables notifications announce,
// until ctx ends.
func listenNFTables(ctx context.Context, b testing.TB, l *listener) {
	c, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	events := nftMonitor(ctx, b, c)
	go func() {
		for ev := range events {
			switch data := ev.Data.(type) {
			case []nftables.SetElement:
				if ev.Type == nftables.MonitorEventTypeNewSetElem {
					for _, e := range data {
						l.note(l.seen, net.IP(e.Key).String())
					}
				}
			case *nftables.Rule:
				if f := strings.Fields(nftrule.Render(data)); ev.Type == nftables.MonitorEventTypeNewRule && len(f) > 2 && f[1] == "saddr" {
					l.note(l.seen, f[2])
				}
			}
		}
	}()
}

func (l *listener) note(at map[string]time.Time, key string) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := at[key]; !ok {
		at[key] = now
	}
}

// seenAt is when key was first seen in m (l.seen or l.probed), waiting up to
// 2 s for it; zero if never.
func (l *listener) seenAt(m map[string]time.Time, key string) time.Time {
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		l.mu.Lock()
		at, ok := m[key]
		l.mu.Unlock()
		if ok {
			return at
		}
	}
	return time.Time{}
}

// BenchmarkDetectionLatency: from the moment the agent's programming is
// visible to the moment netready's ADD sees it (the marker's readyAt),
// p50 and p99 per source over 200 ADDs, beside a 200 ms polling loop
// watching the same sources in the same run.
func BenchmarkDetectionLatency(b *testing.B) {
	// Two at a time on two cores: the figures show detection, not a queue
	// for the CPU.
	adds, parallel := 200, 2
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		adds = v
	}
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_PARALLEL")); err == nil && v > 0 {
		parallel = v
	}
	type source struct {
		name, conflist string
		check          map[string]any
	}
	sources := []source{
		{"iptables", "policy-agent.conflist", map[string]any{"kind": "iptables", "chain": "", "match": "-s {{.IP}}/32"}},
		{"nftables", "policy-agent.conflist", map[string]any{"kind": "nftables", "family": "inet", "table": "", "set": "pods4"}},
		{"file", "calico-style.conflist", map[string]any{"kind": "file", "preset": "calico"}},
		{"http", "policy-agent.conflist", map[string]any{"kind": "http", "url": ""}},
	}
	var report, floor []string
	for _, src := range sources {
		if only := os.Getenv("NETREADY_BENCH_SOURCES"); only != "" && !strings.Contains(only, src.name) {
			continue
		}
		n, agent := newAgentNet(b, src.conflist, 100*time.Millisecond, func(n *testNet, _ map[string]any) {
			n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, src.check}
			n.Netready()["timeout"] = "10s"
		})
		// newAgentNet filled the agent's names into the check.
		ctx, cancel := context.WithCancel(context.Background())
		pol := startPoller(ctx, baselineProbe(b, src.name, agent))
		lis := startListener(ctx, b, src.name, agent)
		var netready, polled, calls, listened, probed, afterFloor []time.Duration
		late := 0
		var mu sync.Mutex
		sem := make(chan struct{}, parallel)
		var wg sync.WaitGroup
		for i := 0; i < adds; i++ {
			wg.Add(1)
			sem <- struct{}{}
			go func(i int) {
				defer wg.Done()
				defer func() { <-sem }()
				ns := fmt.Sprintf("nrb%s-%d", n.ID, i)
				mustRun(b, "ip", "netns", "add", ns)
				defer exec.Command("ip", "netns", "del", ns).Run()
				path := "/var/run/netns/" + ns
				cid := containerID(path)
				name := fmt.Sprintf("p%d", i)
				// 300-500 ms after the veth joins the bridge, when the
				// chain (cnitool, bridge, host-local, netready's start) has
				// usually reached netready's wait, even on a busy machine;
				// at a random phase of the baseline's 200 ms cycle.
				agent.setPod(cid, "default", name, 300*time.Millisecond+rand.N(200*time.Millisecond))
				out, err := n.cnitool("add", path, podArgs("default", name))
				defer n.cnitool("del", path, podArgs("default", name))
				if err != nil {
					b.Errorf("ADD %d: %v", i, err)
					return
				}
				var res struct{ IPs []struct{ Address string } }
				json.Unmarshal([]byte(out), &res)
				ip := strings.Split(res.IPs[0].Address, "/")[0]
				key := ip
				if src.name == "file" {
					key = filepath.Join(agent.Calico, checks.CalicoStatusFileName("default", name, "eth0"))
				}
				pol.watch(key)
				ev := agent.visible(src.name, ip)
				m := n.readMarker(cid, "eth0")
				seen := pol.seenAt(key)
				var heard, found time.Time
				if lis != nil {
					heard = lis.seenAt(lis.seen, key)
					if src.name == "nftables" {
						found = lis.seenAt(lis.probed, key)
					}
				}
				// An iptables rule becomes visible inside the agent's
				// iptables process, before it exits: measure from the
				// start of the agent's call, for netready and the baseline.
				began := time.Unix(0, ev.BeganAt)
				mu.Lock()
				if m.CreatedAt.After(began) {
					// netready started after the programming: its first
					// probe found it. That is the chain's timing, not
					// detection.
					late++
					mu.Unlock()
					return
				}
				netready = append(netready, m.ReadyAt.Sub(began))
				calls = append(calls, time.Unix(0, ev.VisibleAt).Sub(began))
				if !seen.IsZero() {
					polled = append(polled, seen.Sub(began))
				}
				if !heard.IsZero() {
					listened = append(listened, heard.Sub(began))
					afterFloor = append(afterFloor, m.ReadyAt.Sub(heard))
				}
				if !found.IsZero() {
					probed = append(probed, found.Sub(began))
				}
				mu.Unlock()
			}(i)
		}
		wg.Wait()
		cancel()
		goal := ""
		switch src.name {
		case "iptables":
			// Issue 24: p50 <= 10 ms on its own. The agent's iptables
			// process takes most of its own call to start, so detection
			// counts from the kernel's notification of the pod's rule,
			// which the floor below hears.
			goal = fmt.Sprintf(" | after the kernel's notification: p50 %s p99 %s (goal p50 <= 10 ms: %s)",
				ms(percentile(afterFloor, .5)), ms(percentile(afterFloor, .99)), verdict(percentile(afterFloor, .5) <= 10*time.Millisecond, afterFloor))
		case "nftables", "file":
			goal = " | goal p99 <= 10 ms: " + verdict(percentile(netready, .99) <= 10*time.Millisecond, netready)
		}
		if lis != nil {
			floor = append(floor, fmt.Sprintf("%-9s n=%3d  p50 %9s p99 %9s p99.9 %9s", src.name, len(listened),
				ms(percentile(listened, .5)), ms(percentile(listened, .99)), ms(percentile(listened, .999))))
			if src.name == "nftables" && len(probed) == 0 {
				b.Errorf("the read floor found no pod IP in set pods4: its reads failed")
			}
			if len(probed) > 0 {
				floor = append(floor, fmt.Sprintf("%-9s n=%3d  p50 %9s p99 %9s p99.9 %9s  (the same, then reading the set back, which netready skips when the event is the pod's own element)", src.name+"+read", len(probed),
					ms(percentile(probed, .5)), ms(percentile(probed, .99)), ms(percentile(probed, .999))))
			}
		}
		report = append(report, fmt.Sprintf("%-9s n=%3d  netready p50 %9s p99 %9s p99.9 %9s%s | 200ms poll p50 %9s p99 %9s | p50 %5.1fx faster | agent call p50 %s | left out: %d ADDs that began after the programming",
			src.name, len(netready), ms(percentile(netready, .5)), ms(percentile(netready, .99)), ms(percentile(netready, .999)), goal,
			ms(percentile(polled, .5)), ms(percentile(polled, .99)),
			float64(percentile(polled, .5))/float64(max(time.Microsecond, percentile(netready, .5))),
			ms(percentile(calls, .5)), late))
	}
	fmt.Printf("\nDetection latency: start of the agent's programming call -> netready ADD detects it (marker readyAt), %d ADDs at a time\n", parallel)
	fmt.Println("  event-driven: nftables (netlink), iptables-nft (nftables netlink: the pod's own rule, read from its notification), file (inotify); polled: http")
	for _, r := range report {
		fmt.Println("  " + r)
	}
	fmt.Println("  the floor: the test process, holding the same event stream open, notes the same change")
	for _, r := range floor {
		fmt.Println("  " + r)
	}
}

// baselineProbe looks at a source once, as the 200 ms loop does.
func baselineProbe(b testing.TB, source string, a *testAgent) func(ip string) bool {
	switch source {
	case "iptables":
		ipt, err := iptables.New()
		if err != nil {
			b.Fatal(err)
		}
		return func(ip string) bool {
			rules, _ := ipt.List("filter", a.Chain)
			for _, r := range rules {
				if strings.Contains(r, "-s "+ip+"/32") {
					return true
				}
			}
			return false
		}
	case "nftables":
		return func(ip string) bool {
			c, err := nftables.New()
			if err != nil {
				return false
			}
			set, err := c.GetSetByName(&nftables.Table{Name: a.Table, Family: nftables.TableFamilyINet}, "pods4")
			if err != nil {
				return false
			}
			elems, _ := c.GetSetElements(set)
			for _, e := range elems {
				if net.IP(e.Key).Equal(net.ParseIP(ip)) {
					return true
				}
			}
			return false
		}
	case "file":
		// Keyed by the status file's path rather than the IP.
		return func(path string) bool {
			_, err := os.Stat(path)
			return err == nil
		}
	case "http":
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil}}
		return func(ip string) bool {
			resp, err := client.Get("http://" + a.HTTP + "/ready?ip=" + ip)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		}
	}
	b.Fatalf("no baseline for %s", source)
	return nil
}

// BenchmarkAddOverhead: an attachment that is already programmed. netready
// (address and route checks) against the reference tuning plugin chained in
// the same place, each run 200 times interleaved on the same prevResult.
//
// Both binaries are installed the way netready-install installs the plugin
// (read whole, written with one write, so the page cache holds them alike),
// four copies of each, run in turn. How a binary came into the page cache
// moves its start-up by up to 10% here: from bin/ as go build wrote it,
// netready's start-up alone was 1.03-1.12x tuning's cached build; from
// tmpfs, 1.16x; installed alike on disk, 1.00-1.02x.
func BenchmarkAddOverhead(b *testing.B) {
	const runs, copies = 200, 4
	// Production keeps markers in /run/netready, a tmpfs, where fsync is
	// nearly free; this machine's /run and /tmp are on disk. Give both
	// plugins' state a tmpfs, as a node would. Binaries stay on disk, as
	// /opt/cni/bin is.
	state := b.TempDir()
	mustRun(b, "mount", "-t", "tmpfs", "-o", "size=16m", "netready-bench", state)
	b.Cleanup(func() { mustRun(b, "umount", state) })
	n := newNet(b, "bridge.conflist", func(n *testNet, _ map[string]any) {
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "route"}}
	})
	n.Netready()["stateDir"] = filepath.Join(state, "netready")
	delete(n.Netready(), "logFile")
	netns := newNS(b)
	out, err := n.add(netns.Path())
	if err != nil {
		b.Fatal(err)
	}
	netreadyConf := n.pluginConf([]byte(out))
	tuning := map[string]any{"cniVersion": "1.1.0", "name": n.Name, "type": "tuning", "dataDir": filepath.Join(state, "tuning"),
		"prevResult": json.RawMessage(out)}
	tuningConf, _ := json.Marshal(tuning)
	env := []string{"CNI_CONTAINERID=" + containerID(netns.Path()), "CNI_IFNAME=eth0", "CNI_NETNS=" + netns.Path()}
	run := func(bin string, conf []byte) time.Duration {
		cmd := exec.Command(bin)
		cmd.Env = append([]string{"CNI_COMMAND=ADD", "CNI_PATH=" + pluginPath}, env...)
		cmd.Stdin = strings.NewReader(string(conf))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v %s", bin, err, out)
		}
		return time.Since(start)
	}
	bins := b.TempDir()
	netready := copyBinary(b, filepath.Join(binDir, "netready"), bins, copies)
	tuningBin := copyBinary(b, filepath.Join(cniBinDir, "tuning"), bins, copies)
	floor := copyBinary(b, floorBinary(b), bins, copies)
	noop := copyBinary(b, noopBinary(b), bins, copies)
	var nr, tu, fl, nrV, tuV, no []time.Duration
	for i := 0; i < runs; i++ {
		c := i % copies
		nr = append(nr, run(netready[c], netreadyConf))
		tu = append(tu, run(tuningBin[c], tuningConf))
		fl = append(fl, run(floor[c], netreadyConf))
		nrV = append(nrV, timeVersion(b, netready[c]))
		tuV = append(tuV, timeVersion(b, tuningBin[c]))
		no = append(no, timeVersion(b, noop[c]))
	}
	ratio := float64(percentile(nr, .5)) / float64(percentile(tu, .5))
	fmt.Printf("\nADD overhead when everything is already programmed (exec of the last plugin, %d runs each from %d copies on disk, interleaved, state on tmpfs)\n", runs, copies)
	fmt.Printf("  netready p50 %s p99 %s | tuning p50 %s p99 %s | ratio p50 %.2fx (goal <= 1.25x: %s)\n",
		ms(percentile(nr, .5)), ms(percentile(nr, .99)), ms(percentile(tu, .5)), ms(percentile(tu, .99)), ratio, verdict(ratio <= 1.25, nr, tu))
	for c := range copies {
		fmt.Printf("    copy %d: netready p50 %s | tuning p50 %s | ratio %.2fx\n", c+1,
			ms(percentile(everyNth(nr, c, copies), .5)), ms(percentile(everyNth(tu, c, copies), .5)),
			float64(percentile(everyNth(nr, c, copies), .5))/float64(percentile(everyNth(tu, c, copies), .5)))
	}
	fmt.Printf("  start alone (VERSION): netready p50 %s | tuning p50 %s | ratio %.2fx; a no-op Go binary p50 %s\n",
		ms(percentile(nrV, .5)), ms(percentile(tuV, .5)), float64(percentile(nrV, .5))/float64(percentile(tuV, .5)), ms(percentile(no, .5)))
	fmt.Printf("  floor: the same kernel work in a minimal Go program (test/floor: netns netlink socket, link and address lookups, route lookup, marker-sized file with fsync and rename) p50 %s | ratio to tuning %.2fx\n",
		ms(percentile(fl, .5)), float64(percentile(fl, .5))/float64(percentile(tu, .5)))
}

// copyBinary copies the executable src into dir n times and returns the
// copies' paths.
func copyBinary(b testing.TB, src, dir string, n int) []string {
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	var out []string
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("%s.%d", filepath.Base(src), i+1))
		if err := os.WriteFile(p, data, 0o755); err != nil {
			b.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// everyNth returns xs[first], xs[first+n], ...
func everyNth(xs []time.Duration, first, n int) []time.Duration {
	var out []time.Duration
	for i := first; i < len(xs); i += n {
		out = append(out, xs[i])
	}
	return out
}

// floorBinary builds test/floor the way the plugin is built.
func floorBinary(b testing.TB) string {
	out := filepath.Join(b.TempDir(), "floor")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "./test/floor")
	cmd.Dir, cmd.Env = "../..", append(os.Environ(), "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build test/floor: %v\n%s", err, msg)
	}
	return out
}

// noopBinary builds a Go program that does nothing, the floor of starting
// any Go binary on this machine.
func noopBinary(b testing.TB) string {
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module noop\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", "noop", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build the no-op binary: %v\n%s", err, out)
	}
	return filepath.Join(dir, "noop")
}

// BenchmarkConcurrentWaitingAdds: 100 netready ADDs at once, each waiting
// on an nftables set element that appears 2 s later: wall time, and peak
// RSS per ADD process.
func BenchmarkConcurrentWaitingAdds(b *testing.B) {
	const adds = 100
	n := newNet(b, "bridge.conflist", nil)
	table := "nrc" + n.ID
	n.Netready()["checks"] = []any{map[string]any{"kind": "nftables", "family": "inet", "table": table, "set": "pods"}}
	n.Netready()["timeout"] = "60s"
	b.Cleanup(func() {
		if c, err := nftables.New(); err == nil {
			c.DelTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
			c.Flush()
		}
	})
	var wg sync.WaitGroup
	rss := make([]int64, adds)
	errs := make([]error, adds)
	pids := make(chan int, adds)
	start := time.Now()
	for i := 0; i < adds; i++ {
		ip := fmt.Sprintf("%s%d", n.Prefix, i+10)
		conf := n.pluginConf(prevResult100(ip+"/24", n.Prefix+"1", "/var/run/netns/none"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(filepath.Join(binDir, "netready"))
			cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_PATH=" + pluginPath, "CNI_CONTAINERID=conc-" + fmt.Sprint(i),
				"CNI_IFNAME=eth0", "CNI_NETNS=/var/run/netns/none"}
			cmd.Stdin = strings.NewReader(string(conf))
			var out strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				errs[i] = err
				return
			}
			pids <- cmd.Process.Pid
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("%v: %s", err, out.String())
			}
			rss[i] = cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	// While they wait: what each costs the node. RSS counts the binary's
	// text pages, which all of them share; PSS splits those among them.
	var pss, anon []int64
	for len(pids) > 0 {
		p, a := smapsRollup(<-pids)
		pss, anon = append(pss, p), append(anon, a)
	}
	time.Sleep(500 * time.Millisecond)
	programmed := time.Now()
	c, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	t := c.AddTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	set := &nftables.Set{Table: t, Name: "pods", KeyType: nftables.TypeIPAddr}
	var elems []nftables.SetElement
	for i := 0; i < adds; i++ {
		elems = append(elems, nftables.SetElement{Key: net.ParseIP(fmt.Sprintf("%s%d", n.Prefix, i+10)).To4()})
	}
	if err := c.AddSet(set, elems); err != nil {
		b.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	wg.Wait()
	wall := time.Since(start)
	for i, err := range errs {
		if err != nil {
			b.Errorf("ADD %d: %v", i, err)
		}
	}
	slices.Sort(rss)
	slices.Sort(pss)
	slices.Sort(anon)
	fmt.Println("\n100 concurrent waiting ADDs (nftables set, programmed 2 s after they started)")
	fmt.Printf("  wall %s (%s after programming) | peak RSS per ADD: median %.1f MB, max %.1f MB\n",
		wall.Round(time.Millisecond), time.Since(programmed).Round(time.Millisecond),
		float64(rss[adds/2])/1024, float64(rss[adds-1])/1024)
	fmt.Printf("  while waiting, per ADD: PSS median %.1f MB, max %.1f MB | anonymous median %.1f MB, max %.1f MB (n=%d)\n",
		float64(pss[len(pss)/2])/1024, float64(pss[len(pss)-1])/1024, float64(anon[len(anon)/2])/1024, float64(anon[len(anon)-1])/1024, len(pss))
}

// smapsRollup returns a process's PSS and anonymous memory in KB.
func smapsRollup(pid int) (pss, anon int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Pss:":
			pss = v
		case "Anonymous:":
			anon = v
		}
	}
	return pss, anon
}

// BenchmarkStatus: STATUS as the runtime runs it (one exec every few
// seconds) with 1,000 and 65,000 addresses allocated in a host-local pool:
// median and p99 over 200 runs. At 65,000, each STATUS is followed by the
// floors, interleaved so that all see the same machine: a no-op Go binary,
// netready VERSION (start, no work) and tuning VERSION (a reference
// plugin's start). Every binary runs from a copy installed as
// BenchmarkAddOverhead installs them.
func BenchmarkStatus(b *testing.B) {
	bins := b.TempDir()
	netready := copyBinary(b, filepath.Join(binDir, "netready"), bins, 1)[0]
	floors := []struct {
		name, bin string
		runs      []time.Duration
	}{
		{name: "a no-op Go binary", bin: copyBinary(b, noopBinary(b), bins, 1)[0]},
		{name: "netready VERSION (start, no work)", bin: netready},
		{name: "tuning VERSION (a reference plugin's start)", bin: copyBinary(b, filepath.Join(cniBinDir, "tuning"), bins, 1)[0]},
	}
	for _, allocated := range []int{1000, 65000} {
		dir := b.TempDir()
		n := newNet(b, "bridge.conflist", nil)
		pool := filepath.Join(dir, n.Name)
		os.MkdirAll(pool, 0o755)
		for i := 0; i < allocated; i++ {
			ip := fmt.Sprintf("10.201.%d.%d", (i+2)/256, (i+2)%256)
			if err := os.WriteFile(filepath.Join(pool, ip), []byte("cid\r\neth0"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		// stateDir on a tmpfs, as /run/netready is on a node: STATUS keeps
		// its count there.
		mustRun(b, "mount", "-t", "tmpfs", "-o", "size=16m", "netready-bench", n.StateDir)
		b.Cleanup(func() { mustRun(b, "umount", n.StateDir) })
		n.Netready()["status"] = map[string]any{"poolAction": "notready", "ipam": map[string]any{"type": "host-local",
			"ranges": []any{[]any{map[string]any{"subnet": "10.201.0.0/16"}}}, "dataDir": dir}}
		conf := n.pluginConf(nil)
		// STATUS keeps its count while the folder's mtime stays. Changed:
		// an mtime a second old before each call (as after an allocation),
		// so that each call counts and keeps. Unchanged: the steady state.
		for _, changing := range []bool{true, false} {
			var runs []time.Duration
			for i := 0; i < 200; i++ {
				if changing {
					at := time.Now().Add(-2 * time.Second)
					os.Chtimes(pool, at, at)
				}
				start := time.Now()
				if _, e := invokeBin(b, netready, "STATUS", conf); e != nil {
					b.Fatalf("STATUS: %+v", e)
				}
				runs = append(runs, time.Since(start))
				if allocated == 65000 {
					for f := range floors {
						floors[f].runs = append(floors[f].runs, timeVersion(b, floors[f].bin))
					}
				}
			}
			goal, what := "", "no sidecar, the pool changed before each call, so each call counts it"
			if !changing {
				what = "the pool unchanged, so the kept count is used"
			}
			if allocated == 65000 {
				goal = " (goal p99 <= 10 ms: " + verdict(percentile(runs, .99) <= 10*time.Millisecond, runs) + ")"
				if changing {
					bare := percentile(floors[2].runs, .99)
					goal += fmt.Sprintf(" (%.2fx tuning VERSION's p99 interleaved, %s)", float64(percentile(runs, .99))/float64(bare), ms(bare))
				}
			}
			fmt.Printf("\nSTATUS with %d addresses allocated (of 65533), %s: median %s, p99 %s%s (exec of the plugin, 200 runs)\n",
				allocated, what, ms(percentile(runs, .5)), ms(percentile(runs, .99)), goal)
		}
		if allocated == 65000 {
			statusWithSidecar(b, n, dir, netready, floors[2].bin)
			var reads []time.Duration
			for range 200 {
				reads = append(reads, readDir(b, pool))
			}
			fmt.Printf("  floor: the kernel's getdents of those 65000 names alone, in process: median %s, p99 %s\n",
				ms(percentile(reads, .5)), ms(percentile(reads, .99)))
		}
	}
	fmt.Println("  floors, each run right after each 65000 STATUS above (400 runs):")
	for _, f := range floors {
		fmt.Printf("    %s: median %s, p99 %s\n", f.name, ms(percentile(f.runs, .5)), ms(percentile(f.runs, .99)))
	}
}

// statusWithSidecar is issue 24's STATUS goal: the pool changing between
// calls, as pods come and go, with the sidecar running as deploy/ runs it.
// Before each call, the real host-local allocates one address, and STATUS
// runs statusGap later, as the runtime would at some point of its period;
// tuning VERSION runs beside each call, before it in every other one. The
// sidecar's keep latency says how many calls land before its count is
// kept, and count the folder themselves, as in the row without it.
func statusWithSidecar(b *testing.B, n *testNet, dataDir, netready, tuning string) {
	const (
		runs      = 200
		statusGap = 250 * time.Millisecond
		// kubelet asks the runtime for its status every 5 s.
		period = 5 * time.Second
	)
	a := startAPIServer(b)
	if _, err := a.Admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	n.write()
	_, logs := startSidecar(b, a, n.StateDir, testNode, "--cni-conf-dir", n.ConfDir)
	kept := pool.CachePath(n.StateDir, n.Name)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(kept)); err != nil {
		b.Fatal(err)
	}
	folder := filepath.Join(dataDir, n.Name)
	keptFor := func(mtimeNs int64) bool {
		c, ok := readKeptCount(kept)
		return ok && c.MtimeNs == mtimeNs
	}
	waitKept := func(mtimeNs int64, until time.Time) bool {
		timeout := time.After(time.Until(until))
		for !keptFor(mtimeNs) {
			select {
			case <-w.Events:
			case <-w.Errors:
			case <-timeout:
				return false
			}
		}
		return true
	}
	hl := &hostLocal{network: n.Name, netns: newNS(b).Path(),
		ipam: fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.201.0.0/16"}]],"dataDir":%q}`, dataDir)}
	var status, bare, keep []time.Duration
	callStatus := func() {
		start := time.Now()
		if _, e := invokeBin(b, netready, "STATUS", n.pluginConf(nil)); e != nil {
			b.Fatalf("STATUS: %+v", e)
		}
		status = append(status, time.Since(start))
	}
	late := 0
	for i := range runs {
		// host-local reads every allocation file at each ADD (to find one
		// of this container's): the change is the folder's mtime, near
		// the ADD's end.
		if err := hl.run("ADD", fmt.Sprintf("bench-%d", i)); err != nil {
			b.Fatal(err)
		}
		info, err := os.Stat(folder)
		if err != nil {
			b.Fatal(err)
		}
		mtime := info.ModTime()
		if waitKept(mtime.UnixNano(), mtime.Add(statusGap)) {
			// The file's mtime is when it was kept (to a clock tick);
			// this wake-up is later.
			if ki, err := os.Stat(kept); err == nil {
				keep = append(keep, ki.ModTime().Sub(mtime))
			}
		} else {
			late++
		}
		time.Sleep(time.Until(mtime.Add(statusGap)))
		// The first exec after the idle gap is slower (p99 +1 ms here,
		// for either binary), so each goes first in half the calls.
		if i%2 == 0 {
			callStatus()
			bare = append(bare, timeVersion(b, tuning))
		} else {
			bare = append(bare, timeVersion(b, tuning))
			callStatus()
		}
	}
	ratio := float64(percentile(status, .99)) / float64(percentile(bare, .99))
	fmt.Printf("\nSTATUS with 65000 addresses allocated and the sidecar running, a real host-local allocation %s before each call: median %s, p99 %s "+
		"(goal p99 <= 2x tuning VERSION's p99 interleaved, each first after the gap in half the calls, median %s, p99 %s: %.2fx, %s) (%d runs)\n",
		statusGap, ms(percentile(status, .5)), ms(percentile(status, .99)), ms(percentile(bare, .5)), ms(percentile(bare, .99)), ratio, verdict(ratio <= 2, status, bare), runs)
	// Call i went first after the gap when i is even (STATUS) or odd (tuning).
	byTurn := func(d []time.Duration, parity int) []time.Duration {
		var out []time.Duration
		for i := parity; i < len(d); i += 2 {
			out = append(out, d[i])
		}
		return out
	}
	fmt.Printf("  the floor that alternating removes, first exec after the gap vs second: STATUS median %s vs %s, p99 %s vs %s; tuning VERSION median %s vs %s, p99 %s vs %s\n",
		ms(percentile(byTurn(status, 0), .5)), ms(percentile(byTurn(status, 1), .5)), ms(percentile(byTurn(status, 0), .99)), ms(percentile(byTurn(status, 1), .99)),
		ms(percentile(byTurn(bare, 1), .5)), ms(percentile(byTurn(bare, 0), .5)), ms(percentile(byTurn(bare, 1), .99)), ms(percentile(byTurn(bare, 0), .99)))
	if len(keep) == 0 {
		data, _ := os.ReadFile(kept)
		info, _ := os.Stat(folder)
		b.Fatalf("the sidecar kept no count within %s of any allocation (%s holds %s; the folder's mtime %d); its log:\n%s", statusGap, kept, data, info.ModTime().UnixNano(), tail(logs.String(), 30))
	}
	worst := percentile(keep, 1)
	fmt.Printf("  the sidecar kept its count p50 %s, p99 %s, max %s after the allocation; %d of %d calls came first (they count the folder, as without the sidecar): "+
		"with the runtime calling every %s, %.1f%% of calls that follow a change land within the max\n",
		ms(percentile(keep, .5)), ms(percentile(keep, .99)), ms(worst), late, runs, period, 100*float64(worst)/float64(period))
}

// readDir times one pass of getdents over dir, reading nothing else.
func readDir(b testing.TB, dir string) time.Duration {
	start := time.Now()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Getdents(fd, buf)
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			return time.Since(start)
		}
	}
}

// BenchmarkPublishLatency: a marker written until its condition is visible
// through a watch of the API server, over 200 pods, at client-go's default
// rate limits (QPS 5, burst 10), one pod at a time.
func BenchmarkPublishLatency(b *testing.B) {
	const pods = 200
	a := startAPIServer(b)
	state := b.TempDir()
	startSidecar(b, a, state, testNode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := a.Admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	visible := make(chan string, pods)
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == "networking.kubernetes.io/pod-network-ready" && c.Status == corev1.ConditionTrue {
					visible <- pod.Name
				}
			}
		}
	}()
	store := marker.Store{Dir: state}
	var lat []time.Duration
	for i := 0; i < pods; i++ {
		name := fmt.Sprintf("bench-%d", i)
		pod := a.newPod(name, testNode)
		m := readyMarker("bench", fmt.Sprintf("c%d", i), pod, "10.200.0.5/24")
		start := time.Now()
		if err := store.Write(m); err != nil {
			b.Fatal(err)
		}
		for got := ""; got != name; {
			select {
			case got = <-visible:
			case <-time.After(30 * time.Second):
				b.Fatalf("condition of %s never visible", name)
			}
		}
		lat = append(lat, time.Since(start))
	}
	fmt.Printf("\nPublish latency, marker written -> condition seen through a watch (%d pods, client-go default QPS 5 / burst 10): p50 %s, p99 %s\n",
		pods, ms(percentile(lat, .5)), ms(percentile(lat, .99)))
}

// readyMarker is the marker ADD writes for pod's eth0 on network when its
// network was ready at once.
func readyMarker(network, containerID string, pod *corev1.Pod, ip string) *marker.Marker {
	now := time.Now()
	return &marker.Marker{Version: marker.Version, Network: network, ContainerID: containerID, IfName: "eth0",
		Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, IPs: []string{ip},
		State: marker.StateReady, CreatedAt: marker.Time{Time: now}, ReadyAt: &marker.Time{Time: now}}
}

// vmRSS is a process's resident set in MB.
func vmRSS(pid int) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(data), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkSidecarFootprint: the sidecar's RSS in steady state with 110
// gated pods on its node (each with a ready marker, all published), 40 pods
// on another node, and a pool it watches; beside the same sidecar with no
// pod at all, in the same run.
func BenchmarkSidecarFootprint(b *testing.B) {
	a := startAPIServer(b)
	confDir, data := b.TempDir(), b.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-pods.conflist"), []byte(fmt.Sprintf(`{"cniVersion":"1.1.0","name":"pods","plugins":[
		{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]],"dataDir":%q}},
		{"type":"netready","status":{"ipam":"auto"}}]}`, data)), 0o644)
	published := func() int {
		n := 0
		pods, _ := a.Admin.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
		for i := range pods.Items {
			if c := publish.Current(&pods.Items[i], publish.DefaultConditionType); c != nil && c.Status == corev1.ConditionTrue {
				n++
			}
		}
		return n
	}
	steady := func(state, node string, want int) float64 {
		listen, _, stop := startSidecarProc(b, a.AgentKubeconfig, state, node, "--cni-conf-dir", confDir)
		defer stop()
		var pid int
		for _, p := range procsMentioning(listen) {
			pid = p
		}
		// Every pod published (client-go's default 5 QPS makes 110
		// patches take about 22 s), then 5 s to settle.
		for start := time.Now(); published() < want; time.Sleep(time.Second) {
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("%d pods published, want %d", published(), want)
			}
		}
		time.Sleep(5 * time.Second)
		worst := 0.0
		for range 10 {
			worst = max(worst, vmRSS(pid))
			time.Sleep(time.Second)
		}
		return worst
	}
	idle := steady(b.TempDir(), "node-idle", 0)

	state := b.TempDir()
	store := marker.Store{Dir: state}
	for i := range 110 {
		name := fmt.Sprintf("fp-%d", i)
		pod := a.newPod(name, testNode)
		m := readyMarker("pods", fmt.Sprintf("c%d", i), pod, fmt.Sprintf("10.99.0.%d/24", i+2))
		if err := store.Write(m); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 40 {
		a.newPod(fmt.Sprintf("other-%d", i), "node-other")
	}
	busy := steady(state, testNode, 110)
	fmt.Printf("\nSidecar RSS, steady state (max of 10 samples over 10 s): %.1f MB with 110 gated pods published (goal <= 30 MB: %s); %.1f MB with no pod, same run\n",
		busy, metOrMissed(busy <= 30), idle)
}

// verdict is metOrMissed for a goal computed from samples: with no
// sample in any of them it says "no data", never "met" (percentile of
// nothing is 0, which meets every upper bound).
func verdict(ok bool, samples ...[]time.Duration) string {
	for _, s := range samples {
		if len(s) == 0 {
			return "no data"
		}
	}
	return metOrMissed(ok)
}

// TestBenchVerdictNeedsData: a goal whose samples are missing prints
// "no data", never "met", though the percentile of nothing (0) is under
// every bound.
func TestBenchVerdictNeedsData(t *testing.T) {
	var none []time.Duration
	some := []time.Duration{time.Millisecond}
	got := []string{
		verdict(percentile(none, .99) <= 10*time.Millisecond, none),
		verdict(percentile(some, .99) <= 10*time.Millisecond, some),
		verdict(true, some, none),
		verdict(false, some),
	}
	want := []string{"no data", "met", "no data", "MISSED"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("verdicts (-want +got):\n%s", diff)
	}
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// BenchmarkBinarySizes: what `make build` produced, beside the reference
// tuning plugin and a no-op Go binary built the same way.
func BenchmarkBinarySizes(b *testing.B) {
	size := func(path string) float64 {
		info, err := os.Stat(path)
		if err != nil {
			b.Fatal(err)
		}
		return float64(info.Size()) / 1e6
	}
	plugin, sidecar := size(filepath.Join(binDir, "netready")), size(filepath.Join(binDir, "netready-sidecar"))
	fmt.Printf("\nBinary sizes: bin/netready %.1f MB (goal <= 8 MB: %s) | bin/netready-sidecar %.1f MB (goal <= 25 MB: %s) | tuning %.1f MB | a no-op Go binary %.1f MB\n",
		plugin, metOrMissed(plugin <= 8), sidecar, metOrMissed(sidecar <= 25), size(filepath.Join(cniBinDir, "tuning")), size(noopBinary(b)))
}

// BenchmarkNFTablesSetProbe: one probe of a set check against a set of
// 60,000 addresses (a cluster's pod IPs, as a policy agent may keep them),
// beside reading every element as the probe did before it looked up the one
// element, in the same run.
func BenchmarkNFTablesSetProbe(b *testing.B) {
	const size = 60000
	table := "nrbig" + randomHex(3)
	var script strings.Builder
	fmt.Fprintf(&script, "add table inet %[1]s\nadd set inet %[1]s pods { type ipv4_addr; }\nadd element inet %[1]s pods { 10.9.0.5", table)
	for i := range size - 1 {
		fmt.Fprintf(&script, ", 10.%d.%d.%d", 100+i/65536, (i/256)%256, i%256)
	}
	script.WriteString(" }\n")
	if err := applyNFT(script.String()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { exec.Command("nft", "delete", "table", "inet", table).Run() })

	att := &attachment.Attachment{Network: "n", ContainerID: "c", IfName: "eth0",
		IPs: []attachment.IP{{Address: net.IPNet{IP: net.ParseIP("10.9.0.5").To4(), Mask: net.CIDRMask(24, 32)}}}}
	env := checks.NewEnv("")
	defer env.Close()
	cs, err := checks.Build([]config.CheckConf{{Kind: config.KindNFTables, Family: "inet", Table: table, Set: "pods"}}, att, env)
	if err != nil {
		b.Fatal(err)
	}
	var probe, dump []time.Duration
	for range 200 {
		start := time.Now()
		if ready, why, err := cs[0].Probe(context.Background()); !ready {
			b.Fatalf("probe: not ready: %s %v", why, err)
		}
		probe = append(probe, time.Since(start))
	}
	conn, err := nftables.New(nftables.AsLasting())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.CloseLasting()
	for range 20 {
		start := time.Now()
		set, err := conn.GetSetByName(&nftables.Table{Name: table, Family: nftables.TableFamilyINet}, "pods")
		if err != nil {
			b.Fatal(err)
		}
		elems, err := conn.GetSetElements(set)
		if err != nil || len(elems) != size {
			b.Fatalf("read %d elements of %d: %v", len(elems), size, err)
		}
		dump = append(dump, time.Since(start))
	}
	fmt.Printf("\nnftables set probe, a set of %d addresses: p50 %s, p99 %s | reading every element (the probe before): p50 %s | %.0fx less\n",
		size, ms(percentile(probe, .5)), ms(percentile(probe, .99)), ms(percentile(dump, .5)),
		float64(percentile(dump, .5))/float64(max(time.Microsecond, percentile(probe, .5))))
}
