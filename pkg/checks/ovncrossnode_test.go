package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"sync"
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
			want: verdict{reached: 1, waiting: []string{"b (nb_cfg 5)"}, nextStall: 2 * time.Second,
				memo: map[string]behind{"b": {Target: 7, Since: raised}}}},
		{name: "one behind this barrier for stallAfter: left out", target: 7, rows: []ovsdb.Row{chassisRow("a", 7, true), chassisRow("b", 5, true)}, now: raised.Add(stall),
			want: verdict{reached: 1, stalled: []string{"b (nb_cfg 5, behind for 3s)"},
				memo: map[string]behind{"b": {Target: 7, Since: raised}}}},
		{name: "behind an older barrier an earlier ADD noted: left out at once", target: 9,
			rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("b", 5, true)}, now: raised,
			memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}},
			want: verdict{reached: 1, stalled: []string{"b (nb_cfg 5, behind for 4s)"},
				memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}}}},
		{name: "the noted chassis caught up with its old barrier: the count starts again", target: 9,
			rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("b", 7, true)}, now: raised,
			memo: map[string]behind{"b": {Target: 7, Since: raised.Add(-4 * time.Second)}},
			want: verdict{reached: 1, waiting: []string{"b (nb_cfg 7)"}, nextStall: stall,
				memo: map[string]behind{"b": {Target: 9, Since: raised}}}},
		{name: "a chassis being removed counts for nothing", target: 9, rows: []ovsdb.Row{chassisRow("a", 9, true), chassisRow("gone", 1, false)}, now: raised,
			want: verdict{reached: 1, memo: map[string]behind{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := judge(tt.rows, tt.target, raised, tt.now, stall, tt.memo)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(verdict{}, behind{})); diff != "" {
				t.Errorf("judge (-want +got):\n%s", diff)
			}
		})
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

// fakeNB is an NB_Global that answers raiseOnce's select and wait+mutate
// as ovsdb-server does; before lets another client raise nb_cfg between
// the read and the raise.
type fakeNB struct {
	mu     sync.Mutex
	nbCfg  int64
	before func(cur int64) int64
}

func (f *fakeNB) serve(t *testing.T) string {
	sock := filepath.Join(t.TempDir(), "nb.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go f.answer(conn)
		}
	}()
	return sock
}

func (f *fakeNB) answer(conn net.Conn) {
	defer conn.Close()
	var req struct {
		Params []json.RawMessage `json:"params"`
		ID     json.RawMessage   `json:"id"`
	}
	if json.NewDecoder(conn).Decode(&req) != nil || len(req.Params) < 2 {
		return
	}
	var op struct {
		Op   string             `json:"op"`
		Rows []map[string]int64 `json:"rows"`
	}
	json.Unmarshal(req.Params[1], &op)
	f.mu.Lock()
	defer f.mu.Unlock()
	var result string
	switch op.Op {
	case "select":
		result = fmt.Sprintf(`[{"rows":[{"nb_cfg":%d}]}]`, f.nbCfg)
	case "wait":
		if f.before != nil {
			f.nbCfg = f.before(f.nbCfg)
		}
		if op.Rows[0]["nb_cfg"] != f.nbCfg {
			result = `[{"details":"\"where\" clause test failed","error":"timed out"},null]`
			break
		}
		f.nbCfg++
		result = `[{},{"count":1}]`
	}
	fmt.Fprintf(conn, `{"id":%s,"result":%s,"error":null}`, req.ID, result)
}

// TestRaiseCoalesces: raiseOnce raises nb_cfg by one, unless another
// client raised it between its read and its raise: then that raise serves,
// and it raises nothing. A failed wait with no newer value is an error, not
// a barrier.
func TestRaiseCoalesces(t *testing.T) {
	type got struct {
		Target int64
		Bumped bool
		Err    bool
		After  int64
	}
	tests := []struct {
		name   string
		before func(int64) int64
		want   got
	}{
		{"nobody else raised: raise", nil, got{Target: 8, Bumped: true, After: 8}},
		{"another raise came between: join it", func(cur int64) int64 { return cur + 2 }, got{Target: 9, After: 9}},
		{"the wait failed but nothing is newer", func(cur int64) int64 { return cur - 1 }, got{Err: true, After: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeNB{nbCfg: 7, before: tt.before}
			sock := f.serve(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			target, bumped, err := raiseOnce(ctx, sock)
			f.mu.Lock()
			after := f.nbCfg
			f.mu.Unlock()
			if diff := cmp.Diff(tt.want, got{Target: target, Bumped: bumped, Err: err != nil, After: after}); diff != "" {
				t.Errorf("raiseOnce (-want +got):\n%s (err %v)", diff, err)
			}
		})
	}
}
