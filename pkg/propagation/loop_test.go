package propagation

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
)

// selfIP is this node's address in the tests; otherIP another node's.
const (
	selfIP  = "10.9.0.1"
	otherIP = "10.9.0.2"
)

// mapping is what the fake agent's ipcache holds for one IP: identity,
// from after on (since the agent started), or a 500 when fail.
type mapping struct {
	identity int64
	after    time.Duration
	fail     bool
}

// startAgent serves a fake cilium-agent API on a unix socket, as the
// real one answers GET /v1/cluster/nodes and GET /v1/ip?cidr=.
func startAgent(t *testing.T, ipcache map[string]mapping) *SocketAgent {
	t.Helper()
	dir, err := os.MkdirTemp("", "nr-prop-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "cilium.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/cluster/nodes":
			fmt.Fprintf(w, `{"client-id":1,"self":"default/node-b","nodes-added":[
				{"name":"default/node-a","primary-address":{"ipv4":{"enabled":true,"ip":%q}}},
				{"name":"default/node-b","primary-address":{"ipv4":{"enabled":true,"ip":%q},"ipv6":{"enabled":false}},
				 "secondary-addresses":[{"ip":"fd00::9"}]}]}`, otherIP, selfIP)
		case "/v1/ip":
			cidr := r.URL.Query().Get("cidr")
			ip, _, _ := strings.Cut(cidr, "/")
			m, ok := ipcache[ip]
			switch {
			case ok && m.fail:
				http.Error(w, "boom", http.StatusInternalServerError)
			case !ok || time.Since(start) < m.after:
				http.NotFound(w, r)
			default:
				_ = json.NewEncoder(w).Encode([]map[string]any{{"cidr": cidr, "identity": m.identity}})
			}
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	a, err := NewSocketAgent(sock)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// event is one CiliumEndpoint event of a test.
type event struct {
	typ      watch.EventType
	name     string
	node     string
	identity int64
	ips      []string
}

func (e event) watchEvent() watch.Event {
	c := &kubeapi.CiliumEndpoint{}
	c.Metadata.Namespace, c.Metadata.Name, c.Metadata.ResourceVersion = "default", e.name, "7"
	if e.identity != 0 {
		c.Status.Identity = &struct {
			ID int64 `json:"id"`
		}{e.identity}
	}
	c.Status.Networking = &struct {
		Addressing []struct {
			IPv4 string `json:"ipv4,omitempty"`
			IPv6 string `json:"ipv6,omitempty"`
		} `json:"addressing,omitempty"`
		Node string `json:"node,omitempty"`
	}{Node: e.node}
	for _, ip := range e.ips {
		a := struct {
			IPv4 string `json:"ipv4,omitempty"`
			IPv6 string `json:"ipv6,omitempty"`
		}{}
		if strings.Contains(ip, ":") {
			a.IPv6 = ip
		} else {
			a.IPv4 = ip
		}
		c.Status.Networking.Addressing = append(c.Status.Networking.Addressing, a)
	}
	return watch.Event{Type: e.typ, Object: c}
}

// outcome is what the meter recorded: observations (slow: 40 ms or more)
// and events not measured, by reason.
type outcome struct {
	Observed, Slow       int
	Busy, Timeout, Agent int
}

func outcomeOf(t *testing.T, m *metrics.Metrics) outcome {
	t.Helper()
	var h dto.Metric
	if err := m.CiliumPropagation.(prometheus.Metric).Write(&h); err != nil {
		t.Fatal(err)
	}
	o := outcome{Observed: int(h.GetHistogram().GetSampleCount())}
	for _, b := range h.GetHistogram().GetBucket() {
		if b.GetUpperBound() == 0.02 {
			o.Slow = o.Observed - int(b.GetCumulativeCount())
		}
	}
	o.Busy = int(testutil.ToFloat64(m.CiliumPropagationUnmeasured.WithLabelValues(metrics.UnmeasuredBusy)))
	o.Timeout = int(testutil.ToFloat64(m.CiliumPropagationUnmeasured.WithLabelValues(metrics.UnmeasuredTimeout)))
	o.Agent = int(testutil.ToFloat64(m.CiliumPropagationUnmeasured.WithLabelValues(metrics.UnmeasuredAgent)))
	return o
}

// testConfig measures quickly: the agent "learns" after 50 ms, and a
// measurement gives up after 400 ms.
func testConfig() Config {
	c := DefaultConfig("node-b", nil)
	c.GiveUp = 400 * time.Millisecond
	return c
}

// TestEventsAreMeasuredOnceEachAndOnlyWhenNew is the event-to-measurement
// logic: an endpoint of a pod on another node, with a final identity and
// an IP, is measured until this node's agent maps the IP to it; an
// endpoint the agent already holds is news only when it was added (or
// gained its identity with this event); this node's own endpoints, ones
// without identity or IP, and deleted ones count nothing; and the bounds
// hold (busy, timeout, agent).
func TestEventsAreMeasuredOnceEachAndOnlyWhenNew(t *testing.T) {
	const later = 50 * time.Millisecond
	for _, tc := range []struct {
		name     string
		ipcache  map[string]mapping
		inFlight int
		events   []event
		want     outcome
	}{
		{name: "added, learned later", ipcache: map[string]mapping{"10.1.0.1": {identity: 300, after: later}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1, Slow: 1}},
		{name: "added, held at the first look: a real near-0", ipcache: map[string]mapping{"10.1.0.1": {identity: 300}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1}},
		{name: "modified, held at the first look: nothing new", ipcache: map[string]mapping{"10.1.0.1": {identity: 300}},
			events: []event{{watch.Modified, "a", otherIP, 300, []string{"10.1.0.1"}}}},
		{name: "modified, learned later", ipcache: map[string]mapping{"10.1.0.1": {identity: 300, after: later}},
			events: []event{{watch.Modified, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1, Slow: 1}},
		{name: "added with the init identity, then final: news even when held", ipcache: map[string]mapping{"10.1.0.1": {identity: 300}},
			events: []event{{watch.Added, "a", otherIP, 5, []string{"10.1.0.1"}}, {watch.Modified, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1}},
		{name: "added without IP, then with one", ipcache: map[string]mapping{"10.1.0.1": {identity: 300}},
			events: []event{{watch.Added, "a", otherIP, 300, nil}, {watch.Modified, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1}},
		{name: "repeated events measure once", ipcache: map[string]mapping{"10.1.0.1": {identity: 300, after: later}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}, {watch.Modified, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1, Slow: 1}},
		{name: "a new identity while measuring: measured from then", ipcache: map[string]mapping{"10.1.0.1": {identity: 301, after: later}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}, {watch.Modified, "a", otherIP, 301, []string{"10.1.0.1"}}},
			want:   outcome{Observed: 1, Slow: 1}},
		{name: "dual stack: every IP", ipcache: map[string]mapping{"10.1.0.1": {identity: 300}, "fd00::1": {identity: 300, after: later}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1", "fd00::1"}}},
			want:   outcome{Observed: 1, Slow: 1}},
		{name: "this node's own pod", ipcache: map[string]mapping{"10.1.0.1": {identity: 300, after: later}},
			events: []event{{watch.Added, "a", selfIP, 300, []string{"10.1.0.1"}}}},
		{name: "no final identity", ipcache: map[string]mapping{"10.1.0.1": {identity: 5}},
			events: []event{{watch.Added, "a", otherIP, 5, []string{"10.1.0.1"}}, {watch.Added, "b", otherIP, 0, []string{"10.1.0.2"}}}},
		{name: "deleted while measuring", ipcache: map[string]mapping{},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}, {watch.Deleted, "a", otherIP, 300, []string{"10.1.0.1"}}}},
		{name: "never learned", ipcache: map[string]mapping{"10.1.0.1": {identity: 299}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Timeout: 1}},
		{name: "the agent fails", ipcache: map[string]mapping{"10.1.0.1": {fail: true}},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}},
			want:   outcome{Agent: 1}},
		{name: "busy beyond the bound", inFlight: 1, ipcache: map[string]mapping{},
			events: []event{{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}, {watch.Added, "b", otherIP, 300, []string{"10.1.0.2"}}},
			want:   outcome{Busy: 1, Timeout: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.inFlight > 0 {
				cfg.InFlight = tc.inFlight
			}
			m := metrics.New(prometheus.NewRegistry())
			l := newLoop(cfg, startAgent(t, tc.ipcache), m)
			l.self = map[netip.Addr]bool{netip.MustParseAddr(selfIP): true}
			events := make(chan watch.Event)
			done := make(chan error)
			go func() { done <- l.run(context.Background(), events) }()
			for _, e := range tc.events {
				events <- e.watchEvent()
			}
			close(events)
			<-done
			l.wait()
			if diff := cmp.Diff(tc.want, outcomeOf(t, m)); diff != "" {
				t.Errorf("recorded (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSelfIPs: the agent's own node's primary and secondary addresses.
func TestSelfIPs(t *testing.T) {
	got, err := startAgent(t, nil).NodeIPs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr(selfIP), netip.MustParseAddr("fd00::9")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("NodeIPs (-want +got):\n%s", diff)
	}
}
