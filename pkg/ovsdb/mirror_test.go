package ovsdb

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestMirrorFollowsTheTable: the mirror holds the monitor's initial rows
// once MirrorTable returns, then each insert, modify and delete; an update
// it cannot read, or the stream's end, makes Rows say it no longer follows.
func TestMirrorFollowsTheTable(t *testing.T) {
	type step struct {
		send   string // an update's params, or "" to close the connection
		want   []string
		wantOK bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"insert, modify, delete", []step{
			{`[null,{"Chassis_Private":{"u3":{"new":{"name":"c","nb_cfg":1}}}}]`, []string{"a=1", "b=2", "c=1"}, true},
			{`[null,{"Chassis_Private":{"u1":{"old":{"nb_cfg":1},"new":{"name":"a","nb_cfg":7}}}}]`, []string{"a=7", "b=2", "c=1"}, true},
			{`[null,{"Chassis_Private":{"u2":{"old":{"name":"b","nb_cfg":2}}}}]`, []string{"a=7", "c=1"}, true},
			{`[null,{"Port_Binding":{"u9":{"new":{"name":"x","nb_cfg":9}}}}]`, []string{"a=7", "c=1"}, true},
		}},
		{"an unreadable update", []step{
			{`[null,{"Chassis_Private":["not","rows"]}]`, nil, false},
		}},
		{"an update without its table-updates", []step{
			{`[null]`, nil, false},
		}},
		{"the stream ends", []step{
			{"", nil, false},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent := make(chan string)
			sock := fakeServer(t, func(dec *json.Decoder, conn net.Conn) {
				var req message
				dec.Decode(&req)
				conn.Write([]byte(`{"id":` + string(req.ID) + `,"error":null,"result":{"Chassis_Private":{` +
					`"u1":{"new":{"name":"a","nb_cfg":1}},"u2":{"new":{"name":"b","nb_cfg":2}}}}}`))
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
			if diff := cmp.Diff([]string{"a=1", "b=2"}, names(t, m)); diff != "" {
				t.Fatalf("rows once MirrorTable returned (-want +got):\n%s", diff)
			}
			<-m.Changed() // the initial rows' token
			for _, s := range tt.steps {
				sent <- s.send
				select {
				case <-m.Changed():
				case <-ctx.Done():
					t.Fatalf("no wake after %s", s.send)
				}
				rows, ok := m.Rows()
				if ok != s.wantOK {
					t.Fatalf("after %q: Rows ok = %v, want %v", s.send, ok, s.wantOK)
				}
				if ok {
					if diff := cmp.Diff(s.want, names(t, m)); diff != "" {
						t.Errorf("after %s (-want +got):\n%s", s.send, diff)
					}
				} else if rows != nil {
					t.Errorf("after %q: Rows = %v with ok false", s.send, rows)
				}
			}
		})
	}
}

// names is each row as name=nb_cfg, sorted.
func names(t *testing.T, m *Mirror) []string {
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
