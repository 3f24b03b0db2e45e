package checks

import (
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

func TestCalicoStatusFileName(t *testing.T) {
	// The example of Calico's own test of WorkloadEndpointKeyToStatusFilename.
	if got, want := CalicoStatusFileName("default", "testpod1", "eth0"), "k8s default%2Ftestpod1 eth0"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestSetHolds(t *testing.T) {
	ip := func(s string) []byte { return net.ParseIP(s).To4() }
	plain := []nftables.SetElement{{Key: ip("10.0.0.1")}, {Key: ip("10.0.0.5")}}
	interval := []nftables.SetElement{ // kernel order: descending, end first
		{Key: ip("10.0.1.0"), IntervalEnd: true}, {Key: ip("10.0.0.4")},
		{Key: ip("10.0.0.3"), IntervalEnd: true}, {Key: ip("10.0.0.1")},
	}
	tests := []struct {
		name     string
		elems    []nftables.SetElement
		interval bool
		key      string
		want     bool
	}{
		{"plain hit", plain, false, "10.0.0.5", true},
		{"plain miss", plain, false, "10.0.0.2", false},
		{"interval first range", interval, true, "10.0.0.2", true},
		{"interval end is exclusive", interval, true, "10.0.0.3", false},
		{"interval second range", interval, true, "10.0.0.200", true},
		{"interval above", interval, true, "10.0.1.0", false},
		{"interval below", interval, true, "10.0.0.0", false},
	}
	for _, tt := range tests {
		if got := setHolds(append([]nftables.SetElement(nil), tt.elems...), tt.interval, ip(tt.key)); got != tt.want {
			t.Errorf("%s: setHolds(%s) = %v, want %v", tt.name, tt.key, got, tt.want)
		}
	}
}

// TestNFTablesConnectionAfterAnError: a request that failed closes the
// Env's connections, and the next probe opens fresh ones; a missing table
// (a probe's everyday answer) keeps them.
func TestNFTablesConnectionAfterAnError(t *testing.T) {
	e := NewEnv("")
	defer e.Close()
	var first *nftConns
	missing := fmt.Errorf("wrapped: %w", unix.ENOENT)
	if err := e.withNFTables(func(c *nftConns) error { first = c; return missing }); err != missing {
		t.Fatalf("withNFTables = %v, want the fn's error", err)
	}
	if e.nft != first {
		t.Errorf("a missing table closed the connection")
	}
	broken := errors.New("socket broke")
	e.withNFTables(func(*nftConns) error { return broken })
	if e.nft != nil {
		t.Errorf("a failed request kept the connection")
	}
	var second *nftConns
	if err := e.withNFTables(func(c *nftConns) error { second = c; return nil }); err != nil || second == nil || second == first {
		t.Errorf("after a failure: conn %p (first %p), err %v; want a fresh connection", second, first, err)
	}
}
