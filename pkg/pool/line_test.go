package taint

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// bigEqual compares counts by value.
var bigEqual = cmp.Comparer(func(a, b *big.Int) bool { return (a == nil) == (b == nil) && (a == nil || a.Cmp(b) == 0) })

func rng(set string, free, capacity, used, cooling int64) PoolRange {
	return PoolRange{Set: set, Free: big.NewInt(free), Capacity: big.NewInt(capacity), Used: used, Cooling: cooling}
}

// TestParsePools: each form the pool watch writes (the sources' own
// wording, from pkg/pool's Describe) reads back as the pool it says.
func TestParsePools(t *testing.T) {
	huge, _ := new(big.Int).SetString("18446744073709551614", 10)
	tests := []struct {
		name string
		msg  string
		want []Pool
	}{
		{"host-local, exhausted", "nr-node: 13 of 13 addresses in use (minFree 1), exhausted",
			[]Pool{{Network: "nr-node", Source: "host-local", Ranges: []PoolRange{rng("", 0, 13, 13, 0)}, MinFree: 1, State: PoolExhausted}}},
		{"host-local, room", "nr-node: 8 of 13 addresses in use (minFree 1)",
			[]Pool{{Network: "nr-node", Source: "host-local", Ranges: []PoolRange{rng("", 5, 13, 8, 0)}, MinFree: 1, State: PoolRoom}}},
		{"cilium exhausted beside dual-stack host-local with a multi-range set and a huge IPv6 pool",
			"cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28 (minFree 1), exhausted; " +
				"podnet: 3 of 13 addresses in use in 10.1.0.0/28,10.2.0.0/30, 2 of 18446744073709551614 addresses in use in fd00::/64 (minFree 2)",
			[]Pool{
				{Network: "cilium", Source: "cilium", Ranges: []PoolRange{rng("10.200.95.0/28", 0, 14, 14, 0)}, MinFree: 1, State: PoolExhausted},
				{Network: "podnet", Source: "host-local", Ranges: []PoolRange{rng("10.1.0.0/28,10.2.0.0/30", 10, 13, 3, 0),
					{Set: "fd00::/64", Free: new(big.Int).Sub(huge, big.NewInt(2)), Capacity: huge, Used: 2}}, MinFree: 2, State: PoolRoom},
			}},
		{"aws, cooling down and growing", "aws (aws-vpc-cni): 3 of 5 addresses in use, 1 cooling down; the source can add addresses (minFree 1)",
			[]Pool{{Network: "aws", Source: "aws-vpc-cni", Ranges: []PoolRange{rng("", 1, 5, 3, 1)}, MinFree: 1, State: PoolGrows}}},
		{"can't tell, no count; a reason with colons and parentheses",
			`cilium (cilium); cannot tell: the Cilium agent: Get "http://cilium/v1/healthz": dial unix /run/c.sock: connect: no such file or directory (ENOENT) (minFree 1)`,
			[]Pool{{Network: "cilium", Source: "cilium", MinFree: 1, State: PoolUnknown,
				Why: `the Cilium agent: Get "http://cilium/v1/healthz": dial unix /run/c.sock: connect: no such file or directory (ENOENT)`}}},
		{"can't tell, with a count: never exhausted", `cilium (cilium): 3 of 5 addresses in use; cannot tell: Cilium's IPv4 pool ("3/5 allocated") can grow through its operator (minFree 1)`,
			[]Pool{{Network: "cilium", Source: "cilium", Ranges: []PoolRange{rng("", 2, 5, 3, 0)}, MinFree: 1, State: PoolUnknown,
				Why: `Cilium's IPv4 pool ("3/5 allocated") can grow through its operator`}}},
		{"cannot count, then a network held after its entry left",
			"podnet: cannot count: host-local's dataDir /var/lib/cni/networks does not exist here: mount it into the sidecar at the same path; " +
				"old.net: 5 of 5 addresses in use (minFree 1), exhausted (its netready entry left the CNI config at 2026-11-24T12:00:00Z; still counted until 2026-11-24T12:10:00Z)",
			[]Pool{
				{Network: "podnet", Source: "host-local", State: PoolUnknown, Why: "host-local's dataDir /var/lib/cni/networks does not exist here: mount it into the sidecar at the same path"},
				{Network: "old.net", Source: "host-local", Ranges: []PoolRange{rng("", 0, 5, 5, 0)}, MinFree: 1, State: PoolExhausted},
			}},
		{"a source that cannot count names itself", "ovn (ovn-kubernetes): cannot count: ovn-kubernetes has not counted yet (listing)",
			[]Pool{{Network: "ovn", Source: "ovn-kubernetes", State: PoolUnknown, Why: "ovn-kubernetes has not counted yet (listing)"}}},
		{"cut short by the bound", "a: 1 of 5 addresses in use (minFree 1); b: 5 of 5 addresses in use (min...",
			[]Pool{
				{Network: "a", Source: "host-local", Ranges: []PoolRange{rng("", 4, 5, 1, 0)}, MinFree: 1, State: PoolRoom},
				{Network: "b", Source: "host-local", Ranges: []PoolRange{rng("", 0, 5, 5, 0)}, State: PoolUnknown, Why: "the condition's message is cut short before this pool's verdict"},
			}},
		{"held: can't tell since, with the counts it has, exhausted when last counted",
			`cilium (cilium): 3 of 5 addresses in use; held: can't tell since 2026-12-01T12:00:07Z: the Cilium agent: GET "http://cilium/v1/healthz": 503 Service Unavailable (minFree 1), exhausted when last counted`,
			[]Pool{{Network: "cilium", Source: "cilium", Ranges: []PoolRange{rng("", 2, 5, 3, 0)}, MinFree: 1, State: PoolUnknown, HeldExhausted: true,
				Since: time.Date(2026, 12, 1, 12, 0, 7, 0, time.UTC), Why: `the Cilium agent: GET "http://cilium/v1/healthz": 503 Service Unavailable`}}},
		{"held without a count, room when last counted, then a network held after its entry left",
			"podnet; held: can't tell since 2026-12-01T12:00:00Z: host-local's dataDir /x does not exist here: mount it (minFree 2); " +
				"ovn (ovn-kubernetes); held: can't tell since 2026-12-01T12:01:00Z: ovn-kubernetes has not counted yet (listing) (minFree 1), exhausted when last counted (its netready entry left the CNI config at 2026-12-01T12:00:00Z; still counted until 2026-12-01T12:10:00Z)",
			[]Pool{
				{Network: "podnet", Source: "host-local", MinFree: 2, State: PoolUnknown, Since: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
					Why: "host-local's dataDir /x does not exist here: mount it"},
				{Network: "ovn", Source: "ovn-kubernetes", MinFree: 1, State: PoolUnknown, HeldExhausted: true, Since: time.Date(2026, 12, 1, 12, 1, 0, 0, time.UTC),
					Why: "ovn-kubernetes has not counted yet (listing)"},
			}},
		{"no pool", "no network on this node has a pool netready watches", []Pool{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParsePools(tt.msg), bigEqual); diff != "" {
				t.Errorf("ParsePools(%q) (-want +got):\n%s", tt.msg, diff)
			}
		})
	}
}

// TestParsePoolsAfterTheBound: wherever Condition's bound cuts the
// message, the whole parts read back as written, and the cut one is never
// said to have room: its mark may be what was cut.
func TestParsePoolsAfterTheBound(t *testing.T) {
	part := "net-%d: 5 of 5 addresses in use (minFree 1), exhausted"
	room := "net-%d: 1 of 5 addresses in use (minFree 1)"
	for pad := range 60 {
		var parts []string
		for i := 0; len(strings.Join(parts, "; ")) <= maxMessage; i++ {
			// Every part of a whole message has room but one, which
			// each pad moves across the bound.
			p := fmt.Sprintf(room, i)
			if i == 10 {
				p = fmt.Sprintf(part, i)
			}
			parts = append(parts, strings.Repeat("x", pad)+p)
		}
		msg := Condition(true, strings.Join(parts, "; ")).Message
		pools := ParsePools(msg)
		for i, p := range pools {
			want := PoolRoom
			if i == 10 {
				want = PoolExhausted
			}
			if i == len(pools)-1 && (i != 10 || !strings.Contains(msg, fmt.Sprintf(part, i))) {
				want = PoolUnknown
			}
			if p.State != want {
				t.Errorf("pad %d, pool %d of %d: state %q, want %q; message %q", pad, i, len(pools), p.State, want, msg)
			}
		}
	}
}

// TestHeldPartReadsBack: what HeldPart writes reads back as the pool it
// says, whatever the cause holds.
func TestHeldPartReadsBack(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, exhausted := range []bool{true, false} {
		for _, why := range []string{"the Cilium agent: 503", "calico-ipam: watch failed (minFree 3): x, y", "ünïcödé: (ENOENT)"} {
			msg := HeldPart("a (cilium): 14 of 14 addresses in use", since, why, 2, exhausted)
			want := []Pool{{Network: "a", Source: "cilium", Ranges: []PoolRange{rng("", 0, 14, 14, 0)}, MinFree: 2, State: PoolUnknown,
				Why: why, Since: since.UTC(), HeldExhausted: exhausted}}
			if diff := cmp.Diff(want, ParsePools(msg), bigEqual); diff != "" {
				t.Errorf("ParsePools(%q) (-want +got):\n%s", msg, diff)
			}
		}
	}
}
