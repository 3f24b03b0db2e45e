package watch

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"github.com/vishvananda/netlink"
)

func woken(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestDirWakesEveryListener: one inotify stream per folder, fanned out.
func TestDirWakesEveryListener(t *testing.T) {
	before := runtime.NumGoroutine()
	dir := t.TempDir()
	h := NewHub(context.Background())
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	src := Source{Kind: Dir, Path: dir}
	for _, ch := range []chan struct{}{a, b} {
		if err := h.SubscribeTo(src, ch); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(h.streams); n != 1 {
		t.Errorf("streams = %d, want one shared stream", n)
	}
	drain(a)
	drain(b)
	os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
	if !woken(a) || !woken(b) {
		t.Error("a listener was not woken by a new file")
	}
	h.Close()
	time.Sleep(50 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after Close", before, after)
	}
	if err := h.SubscribeTo(src, a); err == nil {
		t.Error("SubscribeTo after Close succeeded")
	}
}

func TestMissingDirIsAnError(t *testing.T) {
	h := NewHub(context.Background())
	defer h.Close()
	err := h.SubscribeTo(Source{Kind: Dir, Path: "/nonexistent/netready"}, make(chan struct{}, 1))
	if err == nil || !strings.Contains(err.Error(), "folder in /nonexistent/netready") {
		t.Errorf("SubscribeTo a missing folder = %v, want an error naming it", err)
	}
}

// TestLinksInNetns: link events inside a pod netns wake the listener; the
// hub ends with its context.
func TestLinksInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root for a network namespace: run `make test` as root")
	}
	netns, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	defer testutils.UnmountNS(netns)
	defer netns.Close()
	ctx, cancel := context.WithCancel(context.Background())
	h := NewHub(ctx)
	ch := make(chan struct{}, 1)
	if err := h.SubscribeTo(Source{Kind: Links, NetNS: netns.Path()}, ch); err != nil {
		t.Fatal(err)
	}
	drain(ch)
	err = netns.Do(func(ns.NetNS) error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "w0"}, PeerName: "w1"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if !woken(ch) {
		t.Error("a new link in the netns did not wake the listener")
	}
	cancel()
	done := make(chan struct{})
	go func() { h.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung after the context ended")
	}
}
