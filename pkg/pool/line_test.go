package pool

import (
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/nodewriter"
)

// bigEqual compares counts by value.
var bigEqual = cmp.Comparer(func(a, b *big.Int) bool { return (a == nil) == (b == nil) && (a == nil || a.Cmp(b) == 0) })

func rng(set string, free, capacity, used, cooling int64) LineRange {
	return LineRange{Set: set, Free: big.NewInt(free), Capacity: big.NewInt(capacity), Used: used, Cooling: cooling}
}

// TestParsePools: each form the pool watch writes (the sources' own
// wording, from pkg/pool's Describe) reads back as the pool it says.
func TestParsePools(t *testing.T) {
	huge, _ := new(big.Int).SetString("18446744073709551614", 10)
	tests := []struct {
		name string
		msg  string
		want []Line
	}{
		{"host-local, exhausted", "nr-node: 13 of 13 addresses in use (minFree 1), exhausted",
			[]Line{{Network: "nr-node", Source: "host-local", Ranges: []LineRange{rng("", 0, 13, 13, 0)}, MinFree: 1, State: StateExhausted}}},
		{"host-local, room", "nr-node: 8 of 13 addresses in use (minFree 1)",
			[]Line{{Network: "nr-node", Source: "host-local", Ranges: []LineRange{rng("", 5, 13, 8, 0)}, MinFree: 1, State: StateRoom}}},
		{"cilium exhausted beside dual-stack host-local with a multi-range set and a huge IPv6 pool",
			"cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28 (minFree 1), exhausted; " +
				"podnet: 3 of 13 addresses in use in 10.1.0.0/28,10.2.0.0/30, 2 of 18446744073709551614 addresses in use in fd00::/64 (minFree 2)",
			[]Line{
				{Network: "cilium", Source: "cilium", Ranges: []LineRange{rng("10.200.95.0/28", 0, 14, 14, 0)}, MinFree: 1, State: StateExhausted},
				{Network: "podnet", Source: "host-local", Ranges: []LineRange{rng("10.1.0.0/28,10.2.0.0/30", 10, 13, 3, 0),
					{Set: "fd00::/64", Free: new(big.Int).Sub(huge, big.NewInt(2)), Capacity: huge, Used: 2}}, MinFree: 2, State: StateRoom},
			}},
		{"aws, cooling down and growing", "aws (aws-vpc-cni): 3 of 5 addresses in use, 1 cooling down; the source can add addresses (minFree 1)",
			[]Line{{Network: "aws", Source: "aws-vpc-cni", Ranges: []LineRange{rng("", 1, 5, 3, 1)}, MinFree: 1, State: StateGrows}}},
		{"can't tell, no count; a reason with colons and parentheses",
			`cilium (cilium); cannot tell: the Cilium agent: Get "http://cilium/v1/healthz": dial unix /run/c.sock: connect: no such file or directory (ENOENT) (minFree 1)`,
			[]Line{{Network: "cilium", Source: "cilium", MinFree: 1, State: StateUnknown,
				Why: `the Cilium agent: Get "http://cilium/v1/healthz": dial unix /run/c.sock: connect: no such file or directory (ENOENT)`}}},
		{"can't tell, with a count: never exhausted", `cilium (cilium): 3 of 5 addresses in use; cannot tell: Cilium's IPv4 pool ("3/5 allocated") can grow through its operator (minFree 1)`,
			[]Line{{Network: "cilium", Source: "cilium", Ranges: []LineRange{rng("", 2, 5, 3, 0)}, MinFree: 1, State: StateUnknown,
				Why: `Cilium's IPv4 pool ("3/5 allocated") can grow through its operator`}}},
		{"cannot count, then a network held after its entry left",
			"podnet: cannot count: host-local's dataDir /var/lib/cni/networks does not exist here: mount it into the sidecar at the same path; " +
				"old.net: 5 of 5 addresses in use (minFree 1), exhausted (its netready entry left the CNI config at 2026-11-24T12:00:00Z; still counted until 2026-11-24T12:10:00Z)",
			[]Line{
				{Network: "podnet", Source: "host-local", State: StateUnknown, Why: "host-local's dataDir /var/lib/cni/networks does not exist here: mount it into the sidecar at the same path"},
				{Network: "old.net", Source: "host-local", Ranges: []LineRange{rng("", 0, 5, 5, 0)}, MinFree: 1, State: StateExhausted},
			}},
		{"a source that cannot count names itself", "ovn (ovn-kubernetes): cannot count: ovn-kubernetes has not counted yet (listing)",
			[]Line{{Network: "ovn", Source: "ovn-kubernetes", State: StateUnknown, Why: "ovn-kubernetes has not counted yet (listing)"}}},
		{"cut short by the bound", "a: 1 of 5 addresses in use (minFree 1); b: 5 of 5 addresses in use (min...",
			[]Line{
				{Network: "a", Source: "host-local", Ranges: []LineRange{rng("", 4, 5, 1, 0)}, MinFree: 1, State: StateRoom},
				{Network: "b", Source: "host-local", Ranges: []LineRange{rng("", 0, 5, 5, 0)}, State: StateUnknown, Why: "the condition's message is cut short before this pool's verdict"},
			}},
		{"held: can't tell since, with the counts it has, exhausted when last counted",
			`cilium (cilium): 3 of 5 addresses in use; held: can't tell since 2026-12-01T12:00:07Z: the Cilium agent: GET "http://cilium/v1/healthz": 503 Service Unavailable (minFree 1), exhausted when last counted`,
			[]Line{{Network: "cilium", Source: "cilium", Ranges: []LineRange{rng("", 2, 5, 3, 0)}, MinFree: 1, State: StateUnknown, HeldExhausted: true,
				Since: time.Date(2026, 12, 1, 12, 0, 7, 0, time.UTC), Why: `the Cilium agent: GET "http://cilium/v1/healthz": 503 Service Unavailable`}}},
		{"held without a count, room when last counted, then a network held after its entry left",
			"podnet; held: can't tell since 2026-12-01T12:00:00Z: host-local's dataDir /x does not exist here: mount it (minFree 2); " +
				"ovn (ovn-kubernetes); held: can't tell since 2026-12-01T12:01:00Z: ovn-kubernetes has not counted yet (listing) (minFree 1), exhausted when last counted (its netready entry left the CNI config at 2026-12-01T12:00:00Z; still counted until 2026-12-01T12:10:00Z)",
			[]Line{
				{Network: "podnet", Source: "host-local", MinFree: 2, State: StateUnknown, Since: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC),
					Why: "host-local's dataDir /x does not exist here: mount it"},
				{Network: "ovn", Source: "ovn-kubernetes", MinFree: 1, State: StateUnknown, HeldExhausted: true, Since: time.Date(2026, 12, 1, 12, 1, 0, 0, time.UTC),
					Why: "ovn-kubernetes has not counted yet (listing)"},
			}},
		{"no pool", "no network on this node has a pool netready watches", []Line{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, ParseLine(tt.msg), bigEqual); diff != "" {
				t.Errorf("ParseLine(%q) (-want +got):\n%s", tt.msg, diff)
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
		for i := 0; len(strings.Join(parts, "; ")) <= MaxLine; i++ {
			// Every part of a whole message has room but one, which
			// each pad moves across the bound.
			p := fmt.Sprintf(room, i)
			if i == 10 {
				p = fmt.Sprintf(part, i)
			}
			parts = append(parts, strings.Repeat("x", pad)+p)
		}
		msg := nodewriter.Condition(true, strings.Join(parts, "; ")).Message
		pools := ParseLine(msg)
		for i, p := range pools {
			want := StateRoom
			if i == 10 {
				want = StateExhausted
			}
			if i == len(pools)-1 && (i != 10 || !strings.Contains(msg, fmt.Sprintf(part, i))) {
				want = StateUnknown
			}
			if p.State != want {
				t.Errorf("pad %d, pool %d of %d: state %q, want %q; message %q", pad, i, len(pools), p.State, want, msg)
			}
		}
	}
}

// TestHeldPartReadsBack: what heldPart writes reads back as the pool it
// says, whatever the cause holds.
func TestHeldPartReadsBack(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, exhausted := range []bool{true, false} {
		for _, why := range []string{"the Cilium agent: 503", "calico-ipam: watch failed (minFree 3): x, y", "ünïcödé: (ENOENT)"} {
			msg := heldPart("a (cilium): 14 of 14 addresses in use", since, why, 2, exhausted)
			want := []Line{{Network: "a", Source: "cilium", Ranges: []LineRange{rng("", 0, 14, 14, 0)}, MinFree: 2, State: StateUnknown,
				Why: why, Since: since.UTC(), HeldExhausted: exhausted}}
			if diff := cmp.Diff(want, ParseLine(msg), bigEqual); diff != "" {
				t.Errorf("ParseLine(%q) (-want +got):\n%s", msg, diff)
			}
		}
	}
}

// TestTruncateKeepsCharactersWhole: a message cut at its byte bound ends
// with "..." after a whole character, whichever byte of a multi-byte
// character the bound falls on, and reads back as cut.
func TestTruncateKeepsCharactersWhole(t *testing.T) {
	for pad := range 4 {
		msg := strings.Repeat("x", pad) + strings.Repeat("€", MaxLine) // 3 bytes each
		got := nodewriter.Condition(false, msg).Message
		if !utf8.ValidString(got) || len(got) > MaxLine || !strings.HasSuffix(got, "€...") {
			t.Errorf("pad %d: message of %d bytes, valid UTF-8 %v, ends %q", pad, len(got), utf8.ValidString(got), got[max(0, len(got)-8):])
		}
		if !cut(got) {
			t.Errorf("pad %d: the cut message does not read back as cut", pad)
		}
	}
	for _, tt := range []struct {
		in   string
		max  int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"aaébcdefgh", 6, "aa..."}, // the bound falls inside é
		{"abcdefghijk", 6, "abc..."},
		{"日本語テキスト", 9, "日本..."},
	} {
		if got := nodewriter.Truncate(tt.in, tt.max); got != tt.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tt.in, tt.max, got, tt.want)
		}
	}
}

// TestLineRoundTrip: what FormatLine writes, ParseLine reads back as the
// pools it says, for every shape of part the pool watch writes.
func TestLineRoundTrip(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	r := func(set string, usable, used, cooling int64) Range {
		return Range{Set: set, Usable: big.NewInt(usable), Used: used, Cooling: cooling}
	}
	tests := []struct {
		name string
		part Part
		want Line
	}{
		{"host-local with room", Part{Network: "podnet", Source: "host-local", MinFree: 2, Count: Count{Ranges: []Range{r("10.1.0.0/24", 253, 3, 0)}}},
			Line{Network: "podnet", Source: "host-local", MinFree: 2, State: StateRoom, Ranges: []LineRange{rng("", 250, 253, 3, 0)}}},
		{"host-local dual stack, exhausted", Part{Network: "ds", Source: "host-local", MinFree: 1, Exhausted: true,
			Count: Count{Ranges: []Range{r("10.1.0.0/30", 1, 1, 0), r("fd00::/126", 2, 0, 0)}}},
			Line{Network: "ds", Source: "host-local", MinFree: 1, State: StateExhausted,
				Ranges: []LineRange{rng("10.1.0.0/30", 0, 1, 1, 0), rng("fd00::/126", 2, 2, 0, 0)}}},
		{"an agent that grows", Part{Network: "aws", Source: "aws-vpc-cni", MinFree: 1, Count: Count{Grows: true, Ranges: []Range{r("IPv4", 14, 14, 0)}}},
			Line{Network: "aws", Source: "aws-vpc-cni", MinFree: 1, State: StateGrows, Ranges: []LineRange{rng("", 0, 14, 14, 0)}}},
		{"an agent with addresses cooling down", Part{Network: "aws", Source: "aws-vpc-cni", MinFree: 1, Exhausted: true, Count: Count{Ranges: []Range{r("IPv4", 14, 10, 4)}}},
			Line{Network: "aws", Source: "aws-vpc-cni", MinFree: 1, State: StateExhausted, Ranges: []LineRange{rng("", 0, 14, 10, 4)}}},
		{"held with counts", Part{Network: "cil", Source: "cilium", MinFree: 2, Exhausted: true, HeldSince: since, Why: "503 Service Unavailable",
			Count: Count{Unknown: "503", Ranges: []Range{r("IPv4", 14, 14, 0)}}},
			Line{Network: "cil", Source: "cilium", MinFree: 2, State: StateUnknown, Why: "503 Service Unavailable", Since: since, HeldExhausted: true,
				Ranges: []LineRange{rng("", 0, 14, 14, 0)}}},
		{"host-local held without counts", Part{Network: "edge", Source: "host-local", MinFree: 1, HeldSince: since, Why: "host-local's dataDir /x does not exist here"},
			Line{Network: "edge", Source: "host-local", MinFree: 1, State: StateUnknown, Why: "host-local's dataDir /x does not exist here", Since: since}},
		{"a network whose entry left", Part{Network: "gone", Source: "host-local", MinFree: 1, Note: "its netready entry left the CNI config at 2026-12-01T12:00:00Z; still counted until 2026-12-01T12:10:00Z",
			Count: Count{Ranges: []Range{r("10.2.0.0/29", 5, 1, 0)}}},
			Line{Network: "gone", Source: "host-local", MinFree: 1, State: StateRoom, Ranges: []LineRange{rng("", 4, 5, 1, 0)}}},
	}
	var parts []Part
	var want []Line
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := FormatLine([]Part{tt.part})
			if diff := cmp.Diff([]Line{tt.want}, ParseLine(line), bigEqual); diff != "" {
				t.Errorf("ParseLine(%q) (-want +got):\n%s", line, diff)
			}
		})
		parts, want = append(parts, tt.part), append(want, tt.want)
	}
	line := FormatLine(parts)
	if diff := cmp.Diff(want, ParseLine(line), bigEqual); diff != "" {
		t.Errorf("every part in one line: ParseLine(%q) (-want +got):\n%s", line, diff)
	}
}
