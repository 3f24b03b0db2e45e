//go:build integration

package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
)

// BenchmarkCrossNodeOVN: on two real OVN chassis (no lag), client pods on
// node A start one after another, ABAB with crossNode on and off. For the
// "on" pods: node B's catch-up (its Chassis_Private.nb_cfg_timestamp, when
// its ovn-controller had the flows for netready's barrier, less A's
// ovn-installed-ts: what OVN itself takes, plus netready's pacing of the
// raise, which the plugin logs as pacedMs), and how long after that ADD
// returned (netready's own cost over it). Both timestamps are
// ovn-controller's, in ms, on this one machine's clock. The "on" pods come
// about 130 ms apart here unpaced, so raiseInterval (200 ms) paces most.
// NETREADY_XN_DIAG=dir captures packets and diagnoses each failed first
// connection into dir (agents.CrossNodeBed.Diagnose).
func BenchmarkCrossNodeOVN(b *testing.B) {
	pods := 20
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		pods = min(max(v/2, 2), 50)
	}
	bed := agents.StartCrossNodeBed(b, "10.200.98.0/24", "10.200.98.2")
	on := bed.Chain(map[string]any{"timeout": "5s", "nbSocket": bed.OVN.NB, "sbSocket": bed.OVN.SB})
	off := bed.Chain(nil)
	// NETREADY_XN_DIAG=dir: capture packets, and diagnose each failed
	// first connection into dir.
	diag := os.Getenv("NETREADY_XN_DIAG")
	if diag != "" {
		bed.Capture(diag)
	}
	var addOn, addOff, catchUp, over []time.Duration
	var onIDs []string
	failed := map[bool]int{}
	for i := range 2 * pods {
		crossNode := i%2 == 0
		list := off
		if crossNode {
			list = on
		}
		ip := fmt.Sprintf("10.200.98.%d", 10+i)
		var counters map[string]int
		if diag != "" {
			counters = bed.Counters()
		}
		rt, took, err := bed.Add(list, fmt.Sprintf("p-%d", i), ip)
		returned := time.Now()
		if err != nil {
			b.Fatalf("ADD %d: %v", i, err)
		}
		if err := bed.Connect(rt); err != nil {
			failed[crossNode]++
			if diag != "" {
				fmt.Printf("pod %d (%s, crossNode %v): ADD returned %s, first connection failed at %s: %v; %s\n", i, ip, crossNode,
					returned.Format("15:04:05.000000"), time.Now().Format("15:04:05.000000"), err, bed.WriteDiagnosis(diag, rt, ip, counters))
			}
		}
		if !crossNode {
			addOff = append(addOff, took)
			continue
		}
		addOn, onIDs = append(addOn, took), append(onIDs, rt.ContainerID)
		installed := msField(agents.OVSMapValue(bed.OVN.A.Vsctl("--columns=external_ids", "find", "Interface", "external_ids:sandbox="+rt.ContainerID), "ovn-installed-ts"))
		reached := msField(strings.TrimSpace(bed.OVN.Sbctl("--bare", "--columns=nb_cfg_timestamp", "find", "Chassis_Private", "name="+bed.OVN.B.Name)))
		if installed.IsZero() || reached.IsZero() {
			b.Fatalf("pod %d: no ovn-installed-ts (%v) or B's nb_cfg_timestamp (%v)", i, installed, reached)
		}
		catchUp = append(catchUp, reached.Sub(installed))
		over = append(over, returned.Sub(reached))
	}
	p := func(d []time.Duration) string {
		return fmt.Sprintf("p50 %s p99 %s", harness.Ms(harness.Percentile(d, .5)), harness.Ms(harness.Percentile(d, .99)))
	}
	paced := pacedFromLog(b, bed.Log, onIDs)
	fmt.Printf("cross-node OVN (2 chassis, %d pods per arm, ABAB): ADD with crossNode %s, without %s; B's catch-up after A's ovn-installed %s, of which netready's pacing of its raise %s; ADD returned after B's catch-up %s (ms timestamps); first connections failed: %d with, %d without\n",
		pods, p(addOn), p(addOff), p(catchUp), p(paced), p(over), failed[true], failed[false])
}

// pacedFromLog is each ADD's wait to raise or join the barrier
// (crossNode.raiseInterval), from the plugin's log lines.
func pacedFromLog(b *testing.B, log string, ids []string) []time.Duration {
	data, err := os.ReadFile(log)
	if err != nil {
		b.Fatal(err)
	}
	var out []time.Duration
	for _, l := range strings.Split(string(data), "\n") {
		if !strings.Contains(l, "cross-node wait done") || !slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(l, "containerID="+id+" ") }) {
			continue
		}
		if _, v, ok := strings.Cut(l, " pacedMs="); ok {
			ms, _ := strconv.Atoi(strings.Fields(v)[0])
			out = append(out, time.Duration(ms)*time.Millisecond)
		}
	}
	if len(out) != len(ids) {
		b.Fatalf("%d pacedMs in the plugin's log for %d ADDs with crossNode", len(out), len(ids))
	}
	return out
}

// msField parses OVSDB's milliseconds since the epoch.
func msField(s string) time.Time {
	ms, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
