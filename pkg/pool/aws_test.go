package pool

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The files under testdata/aws are what ipamd serves, written by ipamd's
// own code: gen-v1.23 marshals datastore.ENIInfos keyed by network card
// as v1.23.2's introspection handler does (container ID and interface
// scrubbed), and renders its metrics package through promhttp;
// gen-v1.19 marshals v1.19.6's ENIInfos, one card, not keyed. Every
// address time is relative to fixtureTime.
var fixtureTime = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "aws", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ipamdStandIn serves /v1/enis and /metrics on 127.0.0.1 from the files
// its fields name; an empty name answers 503.
type ipamdStandIn struct {
	enis, metrics atomic.Value // string
	srv           *httptest.Server
}

func newIPAMDStandIn(t *testing.T, enis, metrics string) *ipamdStandIn {
	s := &ipamdStandIn{}
	s.enis.Store(enis)
	s.metrics.Store(metrics)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := ""
		switch r.URL.Path {
		case "/v1/enis":
			name = s.enis.Load().(string)
		case "/metrics":
			name = s.metrics.Load().(string)
		}
		if name == "" {
			http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write(fixture(t, name))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *ipamdStandIn) source(t *testing.T) *awsIPAMD {
	t.Helper()
	src, err := New("aws-cni", json.RawMessage(`{"type":"aws-vpc-cni","url":"`+s.srv.URL+`","metrics":"`+s.srv.URL+`/metrics"}`))
	if err != nil {
		t.Fatal(err)
	}
	a := src.(*awsIPAMD)
	a.now = func() time.Time { return fixtureTime }
	return a
}

// TestAWSSource reads ipamd's exact shapes: a pool that can still grow,
// one at the node's maximum, one whose last free address cools down, a
// prefix-delegated /28, two network cards, and v1.19's unkeyed object.
func TestAWSSource(t *testing.T) {
	tests := []struct {
		name, enis, metrics string
		minFree             int
		want                view
		exhausted           string
	}{
		{"a warm pool below the node's maximum grows", "enis-grows.json", "metrics-grows.txt", 2,
			view{Ranges: []string{"IPv4 3/5 (1 cooling)"}, Grows: true, Said: "ipamd holds 5 addresses, the node takes at most 29 (awscni_ip_max)"}, ""},
		{"at the node's maximum", "enis-atmax.json", "metrics-atmax.txt", 1,
			view{Ranges: []string{"IPv4 2/2"}, Said: "ipamd holds 2 addresses, the node takes at most 2 (awscni_ip_max)"},
			"IP pool exhausted (2 of 2 addresses in use): ipamd holds 2 addresses, the node takes at most 2 (awscni_ip_max)"},
		{"an address cooling down is not free", "enis-cooldown.json", "metrics-atmax.txt", 1,
			view{Ranges: []string{"IPv4 1/2 (1 cooling)"}, Said: "ipamd holds 2 addresses, the node takes at most 2 (awscni_ip_max)"},
			"IP pool exhausted (1 of 2 addresses in use, 1 cooling down): ipamd holds 2 addresses, the node takes at most 2 (awscni_ip_max)"},
		{"a delegated /28 counts 16", "enis-pd.json", "metrics-pd.txt", 1,
			view{Ranges: []string{"IPv4 3/16 (1 cooling)"}, Grows: true, Said: "ipamd holds 16 addresses, the node takes at most 432 (awscni_ip_max)"}, ""},
		{"two network cards add up", "enis-cards.json", "metrics-atmax.txt", 2,
			view{Ranges: []string{"IPv4 5/6"}, Said: "ipamd holds 6 addresses, the node takes at most 2 (awscni_ip_max)"},
			"IP pool below minFree 2 (5 of 6 addresses in use): ipamd holds 6 addresses, the node takes at most 2 (awscni_ip_max)"},
		{"v1.19 serves one card's object", "enis-v1.19-grows.json", "metrics-grows.txt", 1,
			view{Ranges: []string{"IPv4 3/5 (1 cooling)"}, Grows: true, Said: "ipamd holds 5 addresses, the node takes at most 29 (awscni_ip_max)"}, ""},
		{"no metrics: counted, cannot tell", "enis-atmax.json", "", 1,
			view{Ranges: []string{"IPv4 2/2"}, Unknown: "cannot tell whether ipamd can add addresses: GET http://HOST/metrics: 503 Service Unavailable"}, ""},
		{"no introspection: cannot tell", "", "metrics-atmax.txt", 1,
			view{Unknown: "ipamd: GET http://HOST/v1/enis: 503 Service Unavailable"}, ""},
		{"metrics without awscni_ip_max", "enis-atmax.json", "enis-atmax.json", 1,
			view{Ranges: []string{"IPv4 2/2"}, Unknown: "cannot tell whether ipamd can add addresses: its metrics: no awscni_ip_max yet (ipamd sets it once it knows the instance type)"}, ""},
		{"an unknown format", "metrics-grows.txt", "metrics-grows.txt", 1,
			view{Unknown: "ipamd's /v1/enis: not a JSON object: invalid character '#' looking for beginning of value"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newIPAMDStandIn(t, tt.enis, tt.metrics)
			cnt, err := s.source(t).Read(context.Background(), &Memo{})
			if err != nil {
				t.Fatal(err)
			}
			got := viewOf(cnt)
			got.Unknown = strings.ReplaceAll(got.Unknown, strings.TrimPrefix(s.srv.URL, "http://"), "HOST")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("count (-want +got):\n%s", diff)
			}
			exhausted := ""
			if err := cnt.Exhausted(tt.minFree); err != nil {
				exhausted = err.Error()
			}
			if diff := cmp.Diff(tt.exhausted, exhausted); diff != "" {
				t.Errorf("Exhausted(%d) (-want +got):\n%s", tt.minFree, diff)
			}
		})
	}
}

// TestAWSRefusal: EC2 refusing ipamd addresses (its error counter rises
// between two reads) stops the pool from growing for refusalWindow; a
// counter that only stands, as after a restart of netready, does not.
func TestAWSRefusal(t *testing.T) {
	s := newIPAMDStandIn(t, "enis-refused.json", "metrics-refused-before.txt")
	a := s.source(t)
	var memo Memo
	read := func(at time.Time) Count {
		t.Helper()
		a.now = func() time.Time { return at }
		cnt, err := a.Read(context.Background(), &memo)
		if err != nil {
			t.Fatal(err)
		}
		return cnt
	}
	if cnt := read(fixtureTime); !cnt.Grows || cnt.Exhausted(1) != nil {
		t.Fatalf("first read = %+v: a standing counter is no refusal seen", cnt)
	}
	s.metrics.Store("metrics-refused-after.txt")
	cnt := read(fixtureTime.Add(10 * time.Second))
	want := "IP pool exhausted (5 of 5 addresses in use): ipamd holds 5 addresses, the node takes at most 29 (awscni_ip_max); EC2 refused it more 0s ago (InsufficientCidrBlocks or InsufficientFreeAddressesInSubnet)"
	if err := cnt.Exhausted(1); err == nil || err.Error() != want {
		t.Errorf("after a refusal: Exhausted = %v, want %q", err, want)
	}
	if cnt := read(fixtureTime.Add(10*time.Second + refusalWindow - time.Second)); cnt.Grows {
		t.Errorf("within refusalWindow: %+v grows", cnt)
	}
	if cnt := read(fixtureTime.Add(10*time.Second + refusalWindow)); !cnt.Grows {
		t.Errorf("after refusalWindow without a new refusal: %+v does not grow", cnt)
	}
}

// TestAWSMetricLine: the Prometheus text format's lines.
func TestAWSMetricLine(t *testing.T) {
	type line struct {
		Name, Labels string
		Value        float64
		OK           bool
	}
	tests := map[string]line{
		`awscni_ip_max 29`: {"awscni_ip_max", "", 29, true},
		`awscni_aws_api_error_count{api="AssignPrivateIpAddresses",error="InsufficientCidrBlocks"} 2 1732700000000`: {"awscni_aws_api_error_count", `api="AssignPrivateIpAddresses",error="InsufficientCidrBlocks"`, 2, true},
		`go_gc_duration_seconds{quantile="0.5"} 1.5e-05`:                                                            {"go_gc_duration_seconds", `quantile="0.5"`, 1.5e-05, true},
		`awscni_ip_max`:           {},
		`awscni_ip_max{api="x" 3`: {},
		`awscni_ip_max many`:      {"awscni_ip_max", "", 0, false},
	}
	for in, want := range tests {
		var got line
		got.Name, got.Labels, got.Value, got.OK = metricLine(in)
		if !want.OK {
			got.Name, got.Labels = want.Name, want.Labels
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("metricLine(%q) (-want +got):\n%s", in, diff)
		}
	}
}
