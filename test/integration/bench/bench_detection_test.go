//go:build integration

package bench

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
)

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
		n, agent := cnitest.NewAgentNet(b, src.conflist, 100*time.Millisecond, func(n *cnitest.TestNet, _ map[string]any) {
			n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, src.check}
			n.Netready()["timeout"] = "10s"
		})
		// NewAgentNet filled the agent's names into the check.
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
				harness.MustRun(b, "ip", "netns", "add", ns)
				defer exec.Command("ip", "netns", "del", ns).Run()
				path := "/var/run/netns/" + ns
				cid := cnitest.ContainerID(path)
				name := fmt.Sprintf("p%d", i)
				// 300-500 ms after the veth joins the bridge, when the
				// chain (cnitool, bridge, host-local, netready's start) has
				// usually reached netready's wait, even on a busy machine;
				// at a random phase of the baseline's 200 ms cycle.
				agent.SetPod(cid, "default", name, 300*time.Millisecond+rand.N(200*time.Millisecond))
				out, err := n.Cnitool("add", path, cnitest.PodArgs("default", name))
				defer n.Cnitool("del", path, cnitest.PodArgs("default", name))
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
				ev := agent.Visible(src.name, ip)
				m := n.ReadMarker(cid, "eth0")
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
				harness.Ms(harness.Percentile(afterFloor, .5)), harness.Ms(harness.Percentile(afterFloor, .99)), verdict(harness.Percentile(afterFloor, .5) <= 10*time.Millisecond, afterFloor))
		case "nftables", "file":
			goal = " | goal p99 <= 10 ms: " + verdict(harness.Percentile(netready, .99) <= 10*time.Millisecond, netready)
		}
		if lis != nil {
			floor = append(floor, fmt.Sprintf("%-9s n=%3d  p50 %9s p99 %9s p99.9 %9s", src.name, len(listened),
				harness.Ms(harness.Percentile(listened, .5)), harness.Ms(harness.Percentile(listened, .99)), harness.Ms(harness.Percentile(listened, .999))))
			if src.name == "nftables" && len(probed) == 0 {
				b.Errorf("the read floor found no pod IP in set pods4: its reads failed")
			}
			if len(probed) > 0 {
				floor = append(floor, fmt.Sprintf("%-9s n=%3d  p50 %9s p99 %9s p99.9 %9s  (the same, then reading the set back, which netready skips when the event is the pod's own element)", src.name+"+read", len(probed),
					harness.Ms(harness.Percentile(probed, .5)), harness.Ms(harness.Percentile(probed, .99)), harness.Ms(harness.Percentile(probed, .999))))
			}
		}
		report = append(report, fmt.Sprintf("%-9s n=%3d  netready p50 %9s p99 %9s p99.9 %9s%s | 200ms poll p50 %9s p99 %9s | p50 %5.1fx faster | agent call p50 %s | left out: %d ADDs that began after the programming",
			src.name, len(netready), harness.Ms(harness.Percentile(netready, .5)), harness.Ms(harness.Percentile(netready, .99)), harness.Ms(harness.Percentile(netready, .999)), goal,
			harness.Ms(harness.Percentile(polled, .5)), harness.Ms(harness.Percentile(polled, .99)),
			float64(harness.Percentile(polled, .5))/float64(max(time.Microsecond, harness.Percentile(netready, .5))),
			harness.Ms(harness.Percentile(calls, .5)), late))
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
func baselineProbe(b testing.TB, source string, a *cnitest.TestAgent) func(ip string) bool {
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
