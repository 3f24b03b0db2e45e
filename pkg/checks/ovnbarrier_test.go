package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestPace(t *testing.T) {
	seen := time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC)
	const interval = 200 * time.Millisecond
	ms := time.Millisecond
	tests := []struct {
		name     string
		now      nbGlobal
		at       time.Time
		interval time.Duration
		want     pacing
	}{
		{name: "idle: no raise stamped, raise at once", now: nbGlobal{cfg: 7}, at: seen, interval: interval,
			want: pacing{raise: true}},
		{name: "the last raise is older than the interval: raise at once", now: nbGlobal{cfg: 7, raisedAt: seen.Add(-250 * ms)}, at: seen, interval: interval,
			want: pacing{raise: true}},
		{name: "a raise 50ms ago: wait for the rest of the interval", now: nbGlobal{cfg: 7, raisedAt: seen.Add(-50 * ms)}, at: seen, interval: interval,
			want: pacing{wait: 150 * ms}},
		{name: "later in that wait", now: nbGlobal{cfg: 7, raisedAt: seen.Add(-50 * ms)}, at: seen.Add(100 * ms), interval: interval,
			want: pacing{wait: 50 * ms}},
		{name: "the interval since the last raise has passed: raise", now: nbGlobal{cfg: 7, raisedAt: seen.Add(-50 * ms)}, at: seen.Add(150 * ms), interval: interval,
			want: pacing{raise: true}},
		{name: "someone raised past the value read: join", now: nbGlobal{cfg: 8, raisedAt: seen.Add(10 * ms)}, at: seen.Add(10 * ms), interval: interval,
			want: pacing{join: true}},
		{name: "a non-netready raise past it (no fresh stamp): join", now: nbGlobal{cfg: 9}, at: seen, interval: interval,
			want: pacing{join: true}},
		{name: "a raiser's clock far ahead: wait no longer than the interval", now: nbGlobal{cfg: 7, raisedAt: seen.Add(time.Hour)}, at: seen.Add(20 * ms), interval: interval,
			want: pacing{wait: 180 * ms}},
		{name: "a raiser's clock far ahead, the interval over: raise", now: nbGlobal{cfg: 7, raisedAt: seen.Add(time.Hour)}, at: seen.Add(interval), interval: interval,
			want: pacing{raise: true}},
		{name: "raiseInterval 0: raise at once, fresh stamp or not", now: nbGlobal{cfg: 7, raisedAt: seen}, at: seen, interval: 0,
			want: pacing{raise: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pace(7, tt.now, seen, tt.at, tt.interval)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(pacing{})); diff != "" {
				t.Errorf("pace (-want +got):\n%s", diff)
			}
		})
	}
}

// fakeNB is an NB_Global that answers the barrier's selects and its
// wait+mutate as ovsdb-server does, and refuses monitors (so the barrier
// polls). before runs ahead of each guarded raise, afterRead after each
// select: either may play another client.
type fakeNB struct {
	mu        sync.Mutex
	nbCfg     int64
	raisedAt  string // the stamp in external_ids, ms; "" for none
	raises    int    // successful raises through this fake
	before    func(f *fakeNB)
	afterRead func(f *fakeNB)
}

func (f *fakeNB) serve(t *testing.T) string { return serveUnix(t, "nb.sock", f.answer) }

// serveUnix listens on a unix socket named name in a temp folder and
// answers each connection with answer, until the test ends.
func serveUnix(t *testing.T, name string, answer func(net.Conn)) string {
	sock := filepath.Join(t.TempDir(), name)
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
			go answer(conn)
		}
	}()
	return sock
}

func (f *fakeNB) answer(conn net.Conn) {
	defer conn.Close()
	var req struct {
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
		ID     json.RawMessage   `json:"id"`
	}
	if json.NewDecoder(conn).Decode(&req) != nil || len(req.Params) < 2 {
		return
	}
	if req.Method != "transact" {
		fmt.Fprintf(conn, `{"id":%s,"result":null,"error":"not supported"}`, req.ID)
		return
	}
	var op struct {
		Op   string             `json:"op"`
		Rows []map[string]int64 `json:"rows"`
	}
	json.Unmarshal(req.Params[1], &op)
	var mutate struct {
		Mutations [][]json.RawMessage `json:"mutations"`
	}
	if len(req.Params) > 2 {
		json.Unmarshal(req.Params[2], &mutate)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var result string
	switch op.Op {
	case "select":
		ids := `["map",[]]`
		if f.raisedAt != "" {
			ids = fmt.Sprintf(`["map",[[%q,%q]]]`, raisedAtKey, f.raisedAt)
		}
		result = fmt.Sprintf(`[{"rows":[{"nb_cfg":%d,"external_ids":%s}]}]`, f.nbCfg, ids)
		if f.afterRead != nil {
			f.afterRead(f)
		}
	case "wait":
		if f.before != nil {
			f.before(f)
		}
		if op.Rows[0]["nb_cfg"] != f.nbCfg {
			result = `[{"details":"\"where\" clause test failed","error":"timed out"},null]`
			break
		}
		f.nbCfg++
		f.raises++
		for _, m := range mutate.Mutations {
			var col, how string
			json.Unmarshal(m[0], &col)
			json.Unmarshal(m[1], &how)
			var pairs []json.RawMessage
			if col == "external_ids" && how == "insert" && json.Unmarshal(m[2], &pairs) == nil {
				var kv [][2]string
				json.Unmarshal(pairs[1], &kv)
				f.raisedAt = kv[0][1]
			}
		}
		result = `[{},{"count":1}]`
	}
	fmt.Fprintf(conn, `{"id":%s,"result":%s,"error":null}`, req.ID, result)
}

// TestBarrierPacesRaises: an idle NB is raised at once, and the raise
// stamped; a fresh raise defers the next one until the interval has
// passed; a raise by another client after the waiter's read serves it
// without a raise of its own; a guard that fails because of such a raise
// joins it.
func TestBarrierPacesRaises(t *testing.T) {
	type got struct {
		Target        int64
		Raised        bool
		Raises        int
		Stamped       bool
		PacedInterval bool // waited at least the rest of the interval
	}
	const interval = 150 * time.Millisecond
	fresh := func() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }
	tests := []struct {
		name      string
		stamp     func() string
		before    func(f *fakeNB)
		afterRead func(f *fakeNB)
		want      got
	}{
		{name: "idle: raise at once", stamp: func() string { return "" },
			want: got{Target: 8, Raised: true, Raises: 1, Stamped: true}},
		{name: "an old raise: raise at once", stamp: func() string { return strconv.FormatInt(time.Now().Add(-time.Minute).UnixMilli(), 10) },
			want: got{Target: 8, Raised: true, Raises: 1, Stamped: true}},
		{name: "a fresh raise: the next waits for the interval", stamp: fresh,
			want: got{Target: 8, Raised: true, Raises: 1, Stamped: true, PacedInterval: true}},
		{name: "another client raises during the wait: join it", stamp: fresh,
			afterRead: func(f *fakeNB) {
				f.afterRead = nil
				f.nbCfg, f.raisedAt = f.nbCfg+1, fresh()
			},
			want: got{Target: 8, Stamped: true}},
		{name: "the guard fails on a raise in between: join it", stamp: func() string { return "" },
			before: func(f *fakeNB) { f.nbCfg += 2 },
			want:   got{Target: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeNB{nbCfg: 7, raisedAt: tt.stamp(), before: tt.before, afterRead: tt.afterRead}
			sock := f.serve(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			target, raised, paced, err := barrier(ctx, sock, interval)
			if err != nil {
				t.Fatal(err)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			// The fresh stamp is in whole ms: 10ms of slack.
			g := got{Target: target, Raised: raised, Raises: f.raises, Stamped: f.raisedAt != "", PacedInterval: paced >= interval-10*time.Millisecond}
			if diff := cmp.Diff(tt.want, g); diff != "" {
				t.Errorf("barrier (-want +got):\n%s", diff)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("barrier took %s, over 2s for an interval of %s", took, interval)
			}
		})
	}
}

// TestBarrierEndsWithCtx: a waiter deferred by a fresh raise gives up at
// its deadline with a reason, and raises nothing.
func TestBarrierEndsWithCtx(t *testing.T) {
	f := &fakeNB{nbCfg: 7, raisedAt: strconv.FormatInt(time.Now().UnixMilli(), 10)}
	sock := f.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, _, err := barrier(ctx, sock, time.Second)
	if err == nil || !strings.Contains(err.Error(), "crossNode.raiseInterval 1s") {
		t.Fatalf("barrier past its deadline: error %v, want one naming crossNode.raiseInterval", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raises != 0 {
		t.Errorf("%d raises after the deadline, want none", f.raises)
	}
}
