package checks

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netready/netready/pkg/config"
)

// fakeSB is an SB as the cross-node wait sees it: the pod's Port_Binding
// is claimed and up, and two chassis report nb_cfg. Its monitor of
// Chassis_Private sends the rows at mirrorCfg, then either ends
// (mirrorEnds) or, after updateAfter, an update to updateCfg; a monitor of
// any other table is refused (so it is polled). Selects of
// Chassis_Private answer selectCfg, or an error with selectFails.
type fakeSB struct {
	mirrorCfg, updateCfg, selectCfg int64
	mirrorEnds, selectFails         bool
	updateAfter                     time.Duration
	mu                              sync.Mutex
	chassisSelects                  int
}

func (f *fakeSB) serve(t *testing.T) string { return serveUnix(t, "sb.sock", f.answer) }

// chassisRows is both chassis at cfg, as table-updates or as select rows.
func chassisRows(cfg int64, asUpdates bool) string {
	a := fmt.Sprintf(`{"name":"a","nb_cfg":%d,"chassis":["uuid","6b3b2f5e-0000-0000-0000-00000000000a"]}`, cfg)
	b := fmt.Sprintf(`{"name":"b","nb_cfg":%d,"chassis":["uuid","6b3b2f5e-0000-0000-0000-00000000000b"]}`, cfg)
	if asUpdates {
		return `{"Chassis_Private":{"ua":{"new":` + a + `},"ub":{"new":` + b + `}}}`
	}
	return `[` + a + `,` + b + `]`
}

func (f *fakeSB) answer(conn net.Conn) {
	defer conn.Close()
	dec := json.NewDecoder(conn)
	var req struct {
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
		ID     json.RawMessage   `json:"id"`
	}
	if dec.Decode(&req) != nil || len(req.Params) < 2 {
		return
	}
	switch req.Method {
	case "monitor":
		if len(req.Params) < 3 || !strings.Contains(string(req.Params[2]), `"Chassis_Private"`) {
			fmt.Fprintf(conn, `{"id":%s,"result":null,"error":"not supported"}`, req.ID)
			return
		}
		fmt.Fprintf(conn, `{"id":%s,"result":%s,"error":null}`, req.ID, chassisRows(f.mirrorCfg, true))
		if f.mirrorEnds {
			return
		}
		time.Sleep(f.updateAfter)
		// A modify: old holds the changed column, new every column.
		fmt.Fprintf(conn, `{"method":"update","id":null,"params":[null,%s]}`,
			strings.ReplaceAll(chassisRows(f.updateCfg, true), `{"new":`, `{"old":{"nb_cfg":0},"new":`))
		var rest json.RawMessage
		dec.Decode(&rest) // until the wait closes it
	case "transact":
		var op struct {
			Table string `json:"table"`
		}
		json.Unmarshal(req.Params[1], &op)
		switch {
		case op.Table == "Port_Binding":
			fmt.Fprintf(conn, `{"id":%s,"result":[{"rows":[{"up":true,"chassis":["uuid","6b3b2f5e-0000-0000-0000-00000000000a"]}]}],"error":null}`, req.ID)
		case f.selectFails:
			fmt.Fprintf(conn, `{"id":%s,"result":null,"error":"the SB is gone"}`, req.ID)
		default:
			f.mu.Lock()
			f.chassisSelects++
			f.mu.Unlock()
			fmt.Fprintf(conn, `{"id":%s,"result":[{"rows":%s}],"error":null}`, req.ID, chassisRows(f.selectCfg, false))
		}
	}
}

// TestCrossNodeWaitReadsTheMirrorThenTheSB: on two chassis with a real
// barrier raise (target 1), the wait is met by the monitor's update, with
// no select of Chassis_Private, even while a select would say otherwise;
// once the monitor ends it reads
// the SB instead; and with the monitor gone and the SB unreadable it is
// not ready, within its bound, saying why.
func TestCrossNodeWaitReadsTheMirrorThenTheSB(t *testing.T) {
	tests := []struct {
		name      string
		sb        *fakeSB
		bound     time.Duration
		wantReady bool
		wantWhy   string
		noSelect  bool // no select of Chassis_Private
	}{
		{"the monitor's update, the SB's select stale", &fakeSB{updateCfg: 1, updateAfter: 300 * time.Millisecond}, 5 * time.Second, true, "", true},
		{"the monitor ends: the SB's select", &fakeSB{mirrorEnds: true, selectCfg: 1}, 5 * time.Second, true, "", false},
		{"the monitor ends and the SB cannot be read", &fakeSB{mirrorEnds: true, selectFails: true}, time.Second, false, "the SB is gone", false},
		{"the monitor's rows stay behind", &fakeSB{updateCfg: 0, updateAfter: 100 * time.Millisecond, selectCfg: 0}, time.Second, false, "not yet at nb_cfg 1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nb := &fakeNB{}
			cn := &config.CrossNodeConf{NBSocket: nb.serve(t), SBSocket: tt.sb.serve(t)}
			cn.Defaults()
			if err := cn.Validate(); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tt.bound)
			defer cancel()
			start := time.Now()
			got := WaitOVNCrossNode(ctx, cn, "default_web-0", t.TempDir())
			if took := time.Since(start); took > tt.bound+3*time.Second {
				t.Errorf("the wait took %s with a %s bound", took, tt.bound)
			}
			if got.Ready != tt.wantReady || !strings.Contains(got.Why, tt.wantWhy) {
				t.Errorf("WaitOVNCrossNode = ready %v, why %q; want ready %v, why containing %q", got.Ready, got.Why, tt.wantReady, tt.wantWhy)
			}
			tt.sb.mu.Lock()
			selects := tt.sb.chassisSelects
			tt.sb.mu.Unlock()
			if tt.noSelect && selects != 0 {
				t.Errorf("%d selects of Chassis_Private, want none: the monitor's rows serve", selects)
			}
			if nb.raises != 1 {
				t.Errorf("%d barrier raises, want 1", nb.raises)
			}
		})
	}
}
