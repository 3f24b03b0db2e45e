package checks

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netready/netready/pkg/ovsdb"
)

func chassisRow(name string, cfg int64, withChassis bool) ovsdb.Row {
	ch := `["set",[]]`
	if withChassis {
		ch = `["uuid","6b3b2f5e-0000-0000-0000-000000000001"]`
	}
	n, _ := json.Marshal(name)
	c, _ := json.Marshal(cfg)
	return ovsdb.Row{"name": n, "nb_cfg": c, "chassis": json.RawMessage(ch)}
}

func TestJudgeChassis(t *testing.T) {
	raised := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	const stall = 3 * time.Second
	tests := []struct {
		name   string
		target int64
		rows   []ovsdb.Row
		now    time.Time
		memo   map[string]behind
		want   verdict
	}{
		{name: "all reached", target: 7, rows: []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 8, true)}, now: raised,
			want: verdict{reached: 2, memo: map[string]behind{}}},
		{name: "one lagging, within the bound", target: 7, rows: []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 5, true)}, now: raised.Add(time.Second),
			want: verdict{reached: 1, waiting: []lagging{{"b", "nb_cfg 5"}}, nextStall: 2 * time.Second,
				memo: map[string]behind{"b": {Target: 7, Since: raised}}}},
		{name: "one behind this barrier for stallAfter: left out", target: 7, rows: []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 5, true)}, now: raised.Add(stall),
			want: verdict{reached: 1, stalled: []lagging{{"b", "nb_cfg 5, behind for 3s"}},
				memo: map[string]behind{"b": {Target: 7, Since: raised}}}},
		{name: "behind an older barrier an earlier ADD noted: left out at once", target: 9,
			rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("b", 5, true)}, now: raised,
			memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}},
			want: verdict{reached: 1, stalled: []lagging{{"b", "nb_cfg 5, behind for 4s"}},
				memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}}}},
		{name: "the noted chassis caught up with its old barrier: the count starts again", target: 9,
			rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("b", 7, true)}, now: raised,
			memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}},
			want: verdict{reached: 1, waiting: []lagging{{"b", "nb_cfg 7"}}, nextStall: stall,
				memo: map[string]behind{"b": {Target: 9, Since: raised}}}},
		{name: "a chassis being removed counts for nothing", target: 9, rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("gone", 1, false)}, now: raised,
			want: verdict{reached: 1, memo: map[string]behind{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.rows, tt.target, raised, tt.now, stall, tt.memo)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(verdict{}, behind{}, lagging{})); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
	}
}

// TestManyChassisAreCounted: a reason or target names five chassis and
// counts the others, each name cut at namedChassisBytes with its state
// kept, so that one attachment's cannot fill the message; the log's list
// is in full.
func TestManyChassisAreCounted(t *testing.T) {
	var stalled []lagging
	for i := range 7 {
		stalled = append(stalled, lagging{fmt.Sprintf("s%d", i), "nb_cfg 5, behind for 3s"})
	}
	v := verdict{reached: 1, waiting: []lagging{{"w0", "nb_cfg 5"}, {"w1", "nb_cfg 6"}}, stalled: stalled}
	long := strings.Repeat("n", 63) + ".example.com"
	for _, tc := range []struct{ got, want string }{
		{v.target(9), "Chassis_Private.nb_cfg >= 9 on 1 of 10 chassis; left out, stalled: s0 (nb_cfg 5, behind for 3s), s1 (nb_cfg 5, behind for 3s), s2 (nb_cfg 5, behind for 3s), s3 (nb_cfg 5, behind for 3s), s4 (nb_cfg 5, behind for 3s) and 2 more"},
		{v.why(9), "not yet at nb_cfg 9: w0 (nb_cfg 5), w1 (nb_cfg 6)"},
		{someChassis([]lagging{{long, "nb_cfg 5"}}), strings.Repeat("n", 37) + "... (nb_cfg 5)"},
		{someChassis([]lagging{{strings.Repeat("n", 40), "nb_cfg 5"}}), strings.Repeat("n", 40) + " (nb_cfg 5)"},
		{someChassis([]lagging{{strings.Repeat("n", 36) + "ééé", "nb_cfg 5"}}), strings.Repeat("n", 36) + "... (nb_cfg 5)"},
		{strings.Join(inFull([]lagging{{long, "nb_cfg 5"}}), ""), long + " (nb_cfg 5)"},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	}
}

func TestBehindFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "net", behindFile)
	if got := readBehind(path); len(got) != 0 {
		t.Fatalf("a missing file reads as %v", got)
	}
	since := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	want := map[string]behind{"b": {Target: 7, Since: since}}
	writeBehind(path, want, nil)
	if diff := cmp.Diff(want, readBehind(path), cmp.AllowUnexported(behind{})); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
}

// TestCrossNodeMetNeedsAChassisThatReached: every chassis left out, or
// none listed, is a barrier that does not move (ovn-northd down): not met.
func TestCrossNodeMetNeedsAChassisThatReached(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name string
		rows []ovsdb.Row
		want bool
	}{
		{"own reached, the other stalled", []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 3, true)}, true},
		{"every chassis stalled", []ovsdb.Row{chassisRow("a", 6, true), chassisRow("b", 3, true)}, false},
		{"no chassis", nil, false},
		{"one still awaited", []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 6, true)}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// b is behind a barrier noted 10 s ago (stalled); in the last
			// row it was raised just now (awaited).
			memo := map[string]behind{"b": {Target: 7, Since: now.Add(-10 * time.Second)}, "a": {Target: 7, Since: now.Add(-10 * time.Second)}}
			if tt.name == "one still awaited" {
				memo = nil
			}
			v := judge(tt.rows, 7, now, now, 3*time.Second, memo)
			if got := v.met(); got != tt.want {
				t.Errorf("met() = %v, want %v (verdict %+v, why %q)", got, tt.want, v, v.why(7))
			}
		})
	}
}
