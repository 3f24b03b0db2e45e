package pool

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// view is a Count as tests compare it.
type view struct {
	Ranges  []string // "set used/usable (cooling)"
	Grows   bool
	Unknown string // its start
	Said    string
}

func viewOf(c Count) view {
	v := view{Grows: c.Grows, Said: c.Said}
	for _, r := range c.Ranges {
		s := fmt.Sprintf("%s %d/%s", r.Set, r.Used, r.Usable)
		if r.Cooling > 0 {
			s += fmt.Sprintf(" (%d cooling)", r.Cooling)
		}
		v.Ranges = append(v.Ranges, s)
	}
	v.Unknown = c.Unknown
	return v
}

// TestParseCiliumIPAM: ipam.status as Cilium v1.20's IPAM.Dump writes it
// (pkg/ipam/allocator.go): "IPv4: " and "IPv6: " parts joined with ", ",
// an empty part for a family that is off. hostScopeAllocator says "N/M
// allocated from CIDR" with M = 2^bits - 2 (ip.CountIPsInCIDR), the CRD
// allocator "N/M allocated", multi-pool "K IPAM pool(s) available", the
// no-op allocator "delegated to plugin".
func TestParseCiliumIPAM(t *testing.T) {
	tests := []struct {
		name   string
		status string
		want   view
	}{
		{"IPv4 only ends in a comma", "IPv4: 252/254 allocated from 10.2.237.0/24, ",
			view{Ranges: []string{"10.2.237.0/24 252/254"}, Said: `Cilium says "IPv4: 252/254 allocated from 10.2.237.0/24"`}},
		{"a full /28", "IPv4: 14/14 allocated from 10.200.0.0/28, ",
			view{Ranges: []string{"10.200.0.0/28 14/14"}, Said: `Cilium says "IPv4: 14/14 allocated from 10.200.0.0/28"`}},
		{"dual stack", "IPv4: 3/254 allocated from 10.0.0.0/24, IPv6: 3/18446744073709551614 allocated from fd00::/64",
			view{Ranges: []string{"10.0.0.0/24 3/254", "fd00::/64 3/18446744073709551614"},
				Said: `Cilium says "IPv4: 3/254 allocated from 10.0.0.0/24, IPv6: 3/18446744073709551614 allocated from fd00::/64"`}},
		{"IPv6 only starts with a comma", ", IPv6: 2/65534 allocated from fd00:10::/112",
			view{Ranges: []string{"fd00:10::/112 2/65534"}, Said: `Cilium says "IPv6: 2/65534 allocated from fd00:10::/112"`}},
		{"CRD or ENI mode is counted but cannot tell", "IPv4: 3/10 allocated, ",
			view{Ranges: []string{"IPv4 3/10"}, Said: `Cilium says "IPv4: 3/10 allocated"`,
				Unknown: `Cilium's IPv4 pool ("3/10 allocated") can grow through its operator (CRD or ENI IPAM), up to a limit the agent does not show`}},
		{"multi-pool has no capacity", "IPv4: 2 IPAM pool(s) available, ",
			view{Said: `Cilium says "IPv4: 2 IPAM pool(s) available"`,
				Unknown: `the Cilium agent's IPv4 status "2 IPAM pool(s) available" has no capacity (multi-pool IPAM, or IPAM delegated to a plugin): netready cannot tell when it runs out`}},
		{"delegated IPAM", "IPv4: delegated to plugin, ",
			view{Said: `Cilium says "IPv4: delegated to plugin"`,
				Unknown: `the Cilium agent's IPv4 status "delegated to plugin" has no capacity (multi-pool IPAM, or IPAM delegated to a plugin): netready cannot tell when it runs out`}},
		{"an unknown form", "Not running",
			view{Said: `Cilium says "Not running"`, Unknown: `the Cilium agent's ipam status "Not running" is in a form netready does not know`}},
		{"counts that are not numbers", "IPv4: many/254 allocated from 10.0.0.0/24, ",
			view{Said: `Cilium says "IPv4: many/254 allocated from 10.0.0.0/24"`, Unknown: `the Cilium agent's IPv4 status "many/254 allocated from 10.0.0.0/24": the count is not N/M`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, viewOf(parseCiliumIPAM(tt.status))); diff != "" {
				t.Errorf("count (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCiliumExhausted: a cluster-pool or kubernetes pool cannot grow, so
// short is exhausted, with Cilium's words; CRD and ENI pools cannot tell.
func TestCiliumExhausted(t *testing.T) {
	tests := []struct {
		status  string
		minFree int
		want    string
	}{
		{"IPv4: 14/14 allocated from 10.200.0.0/28, ", 1,
			`IP pool exhausted (14 of 14 addresses in use): Cilium says "IPv4: 14/14 allocated from 10.200.0.0/28"`},
		{"IPv4: 12/14 allocated from 10.200.0.0/28, ", 3,
			`IP pool below minFree 3 (12 of 14 addresses in use): Cilium says "IPv4: 12/14 allocated from 10.200.0.0/28"`},
		{"IPv4: 12/14 allocated from 10.200.0.0/28, ", 2, ""},
		{"IPv4: 3/254 allocated from 10.0.0.0/24, IPv6: 65534/65534 allocated from fd00::/112", 1,
			`IP pool exhausted (65534 of 65534 addresses in use in fd00::/112): Cilium says "IPv4: 3/254 allocated from 10.0.0.0/24, IPv6: 65534/65534 allocated from fd00::/112"`},
		{"IPv4: 10/10 allocated, ", 1, ""},
		{"IPv4: 2 IPAM pool(s) available, ", 1, ""},
	}
	for _, tt := range tests {
		t.Run(tt.status, func(t *testing.T) {
			got := ""
			if err := parseCiliumIPAM(tt.status).Exhausted(tt.minFree); err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Exhausted(%d) (-want +got):\n%s", tt.minFree, diff)
			}
		})
	}
}

// serveUnix serves h on a unix socket in a temp folder, as the agent
// serves its API, and returns the socket's unix:// URL.
func serveUnix(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "unix://" + sock
}

// TestCiliumSource reads a stand-in agent on a unix socket: the full
// status (no brief header), an agent without ipam yet, one that fails, one
// that answers garbage, one that is gone.
func TestCiliumSource(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    view
	}{
		{"the full status", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/healthz" || r.Header.Get("brief") != "" {
				http.Error(w, "want GET /v1/healthz without brief", 400)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{
				"cilium": map[string]any{"state": "Ok"},
				"ipam": map[string]any{"status": "IPv4: 5/14 allocated from 10.200.0.0/28, ", "ipv4": []string{"10.200.0.1"},
					"allocations": map[string]string{"10.200.0.1": "router", "10.200.0.9": "health"}},
			})
		}, view{Ranges: []string{"10.200.0.0/28 5/14"}, Said: `Cilium says "IPv4: 5/14 allocated from 10.200.0.0/28"`}},
		{"no ipam yet", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`{"cilium":{"state":"Warning"}}`))
		}, view{Unknown: "the Cilium agent's status has no ipam yet (is the agent still starting?)"}},
		{"an error status", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", 500)
		}, view{Unknown: "the Cilium agent: GET unix://SOCK /v1/healthz: 500 Internal Server Error"}},
		{"not JSON", func(w http.ResponseWriter, r *http.Request) {
			w.Write([]byte(`<html>`))
		}, view{Unknown: "the Cilium agent's status at unix://SOCK is not JSON: invalid character '<' looking for beginning of value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := serveUnix(t, tt.handler)
			src, err := New("podnet", json.RawMessage(`{"type":"cilium","socket":"`+sock+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			cnt, err := src.Read(context.Background(), &Memo{})
			if err != nil {
				t.Fatal(err)
			}
			got := viewOf(cnt)
			got.Unknown = strings.ReplaceAll(got.Unknown, strings.TrimPrefix(sock, "unix://"), "SOCK")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("count (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no agent", func(t *testing.T) {
		src, _ := New("podnet", json.RawMessage(`{"type":"cilium","socket":"unix://`+filepath.Join(t.TempDir(), "none.sock")+`"}`))
		cnt, err := src.Read(context.Background(), &Memo{})
		if err != nil || !strings.Contains(cnt.Unknown, "no such file or directory") || cnt.Exhausted(1) != nil {
			t.Errorf("Read = %+v, %v; want cannot tell, naming the missing socket", cnt, err)
		}
	})
}

// TestCiliumHungAgent: an agent that accepts and never answers costs one
// bounded read, and cannot tell.
func TestCiliumHungAgent(t *testing.T) {
	sock := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	src, _ := New("podnet", json.RawMessage(`{"type":"cilium","socket":"`+sock+`"}`))
	start := time.Now()
	cnt, err := src.Read(context.Background(), &Memo{})
	if took := time.Since(start); took > readBudget+250*time.Millisecond {
		t.Errorf("Read took %s, want about readBudget (%s)", took, readBudget)
	}
	if err != nil || !strings.Contains(cnt.Unknown, "deadline exceeded") || cnt.Exhausted(0) != nil {
		t.Errorf("Read = %+v, %v; want cannot tell: deadline exceeded", cnt, err)
	}
}
