//go:build integration

package bench

import (
	"fmt"
	"os"
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
// ovn-installed-ts: the floor, what OVN itself takes), and how long after
// that ADD returned (netready's own cost over the floor). Both timestamps
// are ovn-controller's, in ms, on this one machine's clock.
func BenchmarkCrossNodeOVN(b *testing.B) {
	pods := 20
	if v, err := strconv.Atoi(os.Getenv("NETREADY_BENCH_ADDS")); err == nil {
		pods = min(max(v/2, 2), 50)
	}
	bed := agents.StartCrossNodeBed(b, "10.200.98.0/24", "10.200.98.2")
	on := bed.Chain(map[string]any{"timeout": "5s", "nbSocket": bed.OVN.NB, "sbSocket": bed.OVN.SB})
	off := bed.Chain(nil)
	var addOn, addOff, catchUp, over []time.Duration
	failed := map[bool]int{}
	for i := range 2 * pods {
		crossNode := i%2 == 0
		list := off
		if crossNode {
			list = on
		}
		rt, took, err := bed.Add(list, fmt.Sprintf("p-%d", i), fmt.Sprintf("10.200.98.%d", 10+i))
		returned := time.Now()
		if err != nil {
			b.Fatalf("ADD %d: %v", i, err)
		}
		if bed.Connect(rt) != nil {
			failed[crossNode]++
		}
		if !crossNode {
			addOff = append(addOff, took)
			continue
		}
		addOn = append(addOn, took)
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
	fmt.Printf("cross-node OVN (2 chassis, %d pods per arm, ABAB): ADD with crossNode %s, without %s; B's catch-up after A's ovn-installed (the floor) %s; ADD returned after B's catch-up %s (ms timestamps); first connections failed: %d with, %d without\n",
		pods, p(addOn), p(addOff), p(catchUp), p(over), failed[true], failed[false])
}

// msField parses OVSDB's milliseconds since the epoch.
func msField(s string) time.Time {
	ms, err := strconv.ParseInt(strings.Trim(s, `"`), 10, 64)
	if err != nil || ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
