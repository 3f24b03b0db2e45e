package explain

import (
	"bytes"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/pool"
)

// TestHeldPoolSaysHeld: a pool that can't tell, as the sidecar writes it
// (pool.FormatLine), reads in kubectl netready status as "held: can't tell
// since <when>: <cause>", never as room or "taints nothing", and says when
// its last verdict keeps the taint.
func TestHeldPoolSaysHeld(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 7, 0, time.UTC)
	// wide has room, though at exactly minFree: the held pool is the
	// taint's, so the counts of an unmarked message are not read for it.
	five := func(used int64) pool.Count {
		return pool.Count{Ranges: []pool.Range{{Set: "IPv4", Usable: big.NewInt(5), Used: used}}}
	}
	msg := pool.FormatLine([]pool.Part{
		{Network: "cil", Source: "cilium", MinFree: 1, Exhausted: true, HeldSince: since, Why: "the Cilium agent: 503 Service Unavailable"},
		{Network: "edge", Source: "host-local", MinFree: 2, Count: five(3), HeldSince: since.Add(time.Minute), Why: "host-local's dataDir /x does not exist here"},
		{Network: "wide", Source: "host-local", MinFree: 2, Count: five(4)},
	})
	var out bytes.Buffer
	WriteNodesText(&out, []NodeReport{{Node: "n1", Tainted: true, Pools: poolsOf("n1", &Condition{Status: "True", Message: msg})}})
	var got []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "n1 ") && (strings.Contains(l, "free") || strings.Contains(l, "held")) {
			got = append(got, strings.Join(strings.Fields(l), " "))
		}
	}
	want := []string{
		"n1 cil cilium - 1 held: can't tell since 2026-12-01T12:00:07Z: the Cilium agent: 503 Service Unavailable (exhausted when last counted: the taint stays)",
		"n1 edge host-local 2 of 5 free 2 held: can't tell since 2026-12-01T12:01:07Z: host-local's dataDir /x does not exist here",
		"n1 wide host-local 1 of 5 free 2 has room",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kubectl netready status pool rows (-want +got):\n%s\n%s", diff, out.String())
	}
}
