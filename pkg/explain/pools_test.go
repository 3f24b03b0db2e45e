package explain

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/pool"
)

// TestHeldPoolSaysHeld: a pool that can't tell, as the sidecar writes it
// (pool.HeldPart), reads in kubectl netready status as "held: can't tell
// since <when>: <cause>", never as room or "taints nothing", and says when
// its last verdict keeps the taint.
func TestHeldPoolSaysHeld(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 7, 0, time.UTC)
	// wide has room, though at exactly minFree: the held pool is the
	// taint's, so the counts of an unmarked message are not read for it.
	msg := pool.HeldPart("cil (cilium)", since, "the Cilium agent: 503 Service Unavailable", 1, true) + "; " +
		pool.HeldPart("edge: 3 of 5 addresses in use", since.Add(time.Minute), "host-local's dataDir /x does not exist here", 2, false) + "; " +
		"wide: 4 of 5 addresses in use (minFree 2)"
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
