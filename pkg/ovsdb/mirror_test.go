package ovsdb

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// initialRows is the fake server's answer to the monitor request.
const initialRows = `{"Chassis_Private":{"u1":{"new":{"name":"a","nb_cfg":1}},"u2":{"new":{"name":"b","nb_cfg":2}}}}`

// TestMirrorFollowsTheTable: the mirror holds the monitor's initial rows
// once MirrorTable returns, then each insert, modify and delete; an update
// it cannot read, or the stream's end, closes Changed and makes Rows say
// it no longer follows the table.
func TestMirrorFollowsTheTable(t *testing.T) {
	type step struct {
		send string   // an update's params, or "" to close the connection
		want []string // the rows after it; nil: the mirror has stopped
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"insert, modify, delete", []step{
			{`[null,{"Chassis_Private":{"u3":{"new":{"name":"c","nb_cfg":1}}}}]`, []string{"a=1", "b=2", "c=1"}},
			{`[null,{"Chassis_Private":{"u1":{"old":{"nb_cfg":1},"new":{"name":"a","nb_cfg":7}}}}]`, []string{"a=7", "b=2", "c=1"}},
			{`[null,{"Chassis_Private":{"u2":{"old":{"name":"b","nb_cfg":2}}}}]`, []string{"a=7", "c=1"}},
			{`[null,{"Port_Binding":{"u9":{"new":{"name":"x","nb_cfg":9}}}}]`, []string{"a=7", "c=1"}},
		}},
		{"a modify with only the changed column keeps the others", []step{
			{`[null,{"Chassis_Private":{"u1":{"old":{"nb_cfg":1},"new":{"nb_cfg":5}}}}]`, []string{"a=5", "b=2"}},
		}},
		{"an unreadable update", []step{
			{`[null,{"Chassis_Private":["not","rows"]}]`, nil},
		}},
		{"a row with neither old nor new", []step{
			{`[null,{"Chassis_Private":{"u1":{}}}]`, nil},
		}},
		{"an inserted row without a monitored column", []step{
			{`[null,{"Chassis_Private":{"u3":{"new":{"nb_cfg":1}}}}]`, nil},
		}},
		{"an update without its table-updates", []step{
			{`[null]`, nil},
		}},
		{"the stream ends", []step{
			{"", nil},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := make(chan string, 1)
			sock := fakeServer(t, func(dec *json.Decoder, conn net.Conn) {
				var req message
				dec.Decode(&req)
				conn.Write([]byte(`{"id":` + string(req.ID) + `,"error":null,"result":` + initialRows + `}`))
				for params := range sent {
					if params == "" {
						return
					}
					conn.Write([]byte(`{"method":"update","id":null,"params":` + params + `}`))
				}
			})
			defer close(sent)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			m, err := MirrorTable(ctx, sock, "OVN_Southbound", "Chassis_Private", []string{"name", "nb_cfg"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"a=1", "b=2"}, rowsOf(t, m)); diff != "" {
				t.Fatalf("rows once MirrorTable returned (-want +got):\n%s", diff)
			}
			if !woken(ctx, m) {
				t.Fatal("no token for the initial rows")
			}
			for _, s := range tt.steps {
				sent <- s.send
				if s.want == nil {
					select {
					case _, ok := <-m.Changed():
						if ok {
							t.Fatalf("after %q: a token, want Changed closed", s.send)
						}
					case <-ctx.Done():
						t.Fatalf("after %q: Changed never closed", s.send)
					}
					if rows, ok := m.Rows(); ok || rows != nil {
						t.Fatalf("after %q: Rows = %v, %v; want nil, false", s.send, rows, ok)
					}
					return
				}
				if !woken(ctx, m) {
					t.Fatalf("after %q: Changed closed or silent", s.send)
				}
				if diff := cmp.Diff(s.want, rowsOf(t, m)); diff != "" {
					t.Errorf("after %s (-want +got):\n%s", s.send, diff)
				}
			}
		})
	}
}

// TestMirrorRefusesWhatItCannotTrust: MirrorTable fails, rather than
// return a mirror that would misjudge, when the initial rows cannot be
// read or an update comes before the reply.
func TestMirrorRefusesWhatItCannotTrust(t *testing.T) {
	tests := []struct {
		name, before, result, wantErr string
	}{
		{"unreadable initial rows", "", `{"Chassis_Private":{"u1":{"new":{"nb_cfg":1}}}}`, `no column "name"`},
		{"an update before the reply", `{"method":"update","id":null,"params":[null,{}]}`, initialRows, "an update came before the reply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := fakeServer(t, func(dec *json.Decoder, conn net.Conn) {
				var req message
				dec.Decode(&req)
				conn.Write([]byte(tt.before + `{"id":` + string(req.ID) + `,"error":null,"result":` + tt.result + `}`))
				var rest message
				dec.Decode(&rest) // until the client closes
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			m, err := MirrorTable(ctx, sock, "OVN_Southbound", "Chassis_Private", []string{"name", "nb_cfg"})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("MirrorTable = %v, %v; want an error containing %q", m, err, tt.wantErr)
			}
		})
	}
}

// woken reports whether a token came on Changed before ctx ended; false
// too when Changed is closed.
func woken(ctx context.Context, m *Mirror) bool {
	select {
	case _, ok := <-m.Changed():
		return ok
	case <-ctx.Done():
		return false
	}
}

// rowsOf is each row as name=nb_cfg, sorted.
func rowsOf(t *testing.T, m *Mirror) []string {
	t.Helper()
	rows, ok := m.Rows()
	if !ok {
		t.Fatal("the mirror no longer follows the table")
	}
	var out []string
	for _, r := range rows {
		var name string
		json.Unmarshal(r["name"], &name)
		cfg, _ := Int(r["nb_cfg"])
		out = append(out, name+"="+strconv.FormatInt(cfg, 10))
	}
	slices.Sort(out)
	return out
}
