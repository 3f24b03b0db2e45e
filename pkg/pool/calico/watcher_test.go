package calico

import (
	"context"
	"errors"
	"math/big"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/netready/netready/pkg/pool"
)

// prefixes compares netip.Prefix values.
var prefixes = cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })

func obj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/v1", "kind": kind,
		"metadata": map[string]any{"name": name},
		"spec":     spec,
	}}
}

func fakes(objs ...runtime.Object) *dynfake.FakeDynamicClient {
	lists := map[schema.GroupVersionResource]string{
		IPAMBlocks: "IPAMBlockList", BlockAffinities: "BlockAffinityList", IPAMConfigs: "IPAMConfigList", IPPools: "IPPoolList",
	}
	node := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": "n1", "labels": map[string]any{"zone": "a"}}}}
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), lists, append(objs, node)...)
}

// blockObj is an ipamblock as calico-ipam writes it: size ordinals, the
// first used ones allocated to one pod attribute each.
func blockObj(cidr, host string, used int) *unstructured.Unstructured {
	p := netip.MustParsePrefix(cidr)
	size := 1 << (p.Addr().BitLen() - p.Bits())
	allocs, unalloc, attrs := make([]any, size), []any{}, []any{}
	for i := range size {
		if i < used {
			allocs[i] = int64(len(attrs))
			attrs = append(attrs, map[string]any{"handle_id": "k8s-pod-network.x", "secondary": map[string]any{"pod": "p", "namespace": "ns", "node": host}})
		} else {
			unalloc = append(unalloc, int64(i))
		}
	}
	return obj("IPAMBlock", strings.NewReplacer(".", "-", "/", "-").Replace(cidr), map[string]any{
		"cidr": cidr, "affinity": "host:" + host, "allocations": allocs, "unallocated": unalloc,
		"attributes": attrs, "strictAffinity": false, "sequenceNumber": int64(1),
	})
}

func TestTransformKeepsOnlyCounts(t *testing.T) {
	u := blockObj("10.0.0.0/29", "n1", 3)
	spec := u.Object["spec"].(map[string]any)
	allocs := spec["allocations"].([]any)
	attrs := spec["attributes"].([]any)
	// A Windows-reserved address and one released (cooling).
	allocs[7] = int64(len(attrs))
	attrs = append(attrs, map[string]any{"handle_id": "windows-reserved-ipam-handle"})
	allocs[2] = int64(len(attrs))
	attrs = append(attrs, map[string]any{"handle_id": "h", "releasedAt": t0.Format(time.RFC3339)})
	spec["attributes"] = attrs
	spec["unallocated"] = []any{int64(3), int64(4), int64(5), int64(6)}

	got := toBlock(u)
	want := &block{ObjectMeta: metav1.ObjectMeta{Name: "10-0-0-0-29"}, CIDR: netip.MustParsePrefix("10.0.0.0/29"),
		Affinity: "host:n1", Free: 4, Used: 2, Reserved: 1, Released: []time.Time{t0}}
	if d := cmp.Diff(want, got, prefixes); d != "" {
		t.Errorf("toBlock (-want +got):\n%s", d)
	}

	a := toAffinity(obj("BlockAffinity", "n1-10-0-0-0-26", map[string]any{"node": "n1", "cidr": "10.0.0.0/26", "state": "confirmed", "deleted": "true"}))
	if d := cmp.Diff(&affinity{ObjectMeta: metav1.ObjectMeta{Name: "n1-10-0-0-0-26"}, Node: "n1", CIDR: netip.MustParsePrefix("10.0.0.0/26"), State: "confirmed", Deleted: true, Host: true}, a, prefixes); d != "" {
		t.Errorf("toAffinity (-want +got):\n%s", d)
	}
	p := toPool(obj("IPPool", "v6", map[string]any{"cidr": "fd00::/64"}))
	if p.BlockSize != 122 || p.Invalid != "" {
		t.Errorf("an IPv6 pool without blockSize: got %d (%s), want Calico's default 122", p.BlockSize, p.Invalid)
	}
	c := toConfig(obj("IPAMConfig", "default", map[string]any{"strictAffinity": true, "autoAllocateBlocks": true, "maxBlocksPerHost": int64(4), "ipCooldownSeconds": int64(30)}))
	if d := cmp.Diff(&ipamConfig{ObjectMeta: metav1.ObjectMeta{Name: "default"}, StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 4, Cooldown: 30 * time.Second}, c, prefixes); d != "" {
		t.Errorf("toConfig (-want +got):\n%s", d)
	}
}

func waitCount(t *testing.T, w *Watcher, ok func(pool.Count) bool) pool.Count {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c := w.Count(context.Background(), pool.Scope{IPv4: true, IPv6: true})
		if ok(c) || time.Now().After(deadline) {
			return c
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestWatcherCounts(t *testing.T) {
	dyn := fakes(
		obj("IPPool", "p", map[string]any{"cidr": "10.0.0.0/26", "blockSize": int64(26), "nodeSelector": "zone == 'a'"}),
		obj("IPAMConfig", "default", map[string]any{"strictAffinity": true, "autoAllocateBlocks": true}),
		blockObj("10.0.0.0/26", "n1", 60),
		obj("BlockAffinity", "n1-10-0-0-0-26", map[string]any{"node": "n1", "cidr": "10.0.0.0/26", "state": "confirmed", "deleted": "false"}),
	)
	w := New(Options{Dynamic: dyn, Node: "n1"})
	if c := w.Count(context.Background(), pool.Scope{IPv4: true, IPv6: true}); !strings.Contains(c.Unknown, "still reading") {
		t.Fatalf("before Run: got %+v, want cannot tell (not synced)", c)
	}
	if !w.Syncing() {
		t.Error("before Run: Syncing() = false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	c := waitCount(t, w, func(c pool.Count) bool { return c.Unknown == "" })
	want := pool.Count{Ranges: []pool.Range{{Set: "IPv4", Usable: big.NewInt(64), Used: 60}},
		Said: "calico-ipam: IPv4: 4 of 64 free in 1 affine block, no free block in p, strictAffinity on"}
	if d := cmp.Diff(want, c, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); d != "" {
		t.Errorf("Count (-want +got):\n%s", d)
	}
	if w.Syncing() {
		t.Error("after the first count: Syncing() = true")
	}
	if w.Type() != "calico-ipam" {
		t.Errorf("Type() = %q", w.Type())
	}
}

func TestWatcherForbiddenSaysAddTheComponent(t *testing.T) {
	dyn := fakes()
	dyn.PrependReactor("list", "ipamblocks", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: Group, Resource: "ipamblocks"}, "", nil)
	})
	w := New(Options{Dynamic: dyn, Node: "n1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	c := waitCount(t, w, func(c pool.Count) bool { return strings.Contains(c.Unknown, "deploy/components/calico") })
	if !strings.Contains(c.Unknown, "deploy/components/calico") || !strings.Contains(c.Unknown, "ipamblocks") {
		t.Errorf("forbidden: got %+v, want cannot tell, naming ipamblocks and deploy/components/calico", c)
	}
	if c.Exhausted(1) != nil {
		t.Errorf("cannot tell must never be exhausted")
	}
	if w.Syncing() {
		t.Error("forbidden is an answer, but Syncing() = true")
	}
}

func TestWatcherUnknownNode(t *testing.T) {
	dyn := fakes(obj("IPPool", "p", map[string]any{"cidr": "10.0.0.0/26"}))
	w := New(Options{Dynamic: dyn, Node: "elsewhere"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	c := waitCount(t, w, func(c pool.Count) bool { return strings.Contains(c.Unknown, "not in the API server") })
	if !strings.Contains(c.Unknown, "node elsewhere is not in the API server") {
		t.Errorf("got %+v", c)
	}
	if w.Syncing() {
		t.Error("a Node that is not there is an answer, but Syncing() = true")
	}
}

// TestWatcherStaleAfterTheWatchFails: after the first sync, a watch that
// keeps failing with transport errors (the API server unreachable) is
// counted from what it holds for StaleAfter, then can't tell, naming the
// watch and since when; once a watch succeeds again it counts again.
func TestWatcherStaleAfterTheWatchFails(t *testing.T) {
	dyn := fakes(
		obj("IPPool", "p", map[string]any{"cidr": "10.0.0.0/26", "blockSize": int64(26), "nodeSelector": "zone == 'a'"}),
		obj("IPAMConfig", "default", map[string]any{"strictAffinity": true, "autoAllocateBlocks": true}),
		blockObj("10.0.0.0/26", "n1", 60),
		obj("BlockAffinity", "n1-10-0-0-0-26", map[string]any{"node": "n1", "cidr": "10.0.0.0/26", "state": "confirmed", "deleted": "false"}),
	)
	refused := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	var broken atomic.Bool
	var first atomic.Pointer[watch.FakeWatcher]
	dyn.PrependWatchReactor("ipamblocks", func(clienttesting.Action) (bool, watch.Interface, error) {
		if broken.Load() {
			return true, nil, refused
		}
		fw := watch.NewFake()
		first.CompareAndSwap(nil, fw)
		return true, fw, nil
	})
	dyn.PrependReactor("list", "ipamblocks", func(clienttesting.Action) (bool, runtime.Object, error) {
		if broken.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	w := New(Options{Dynamic: dyn, Node: "n1", StaleAfter: time.Minute})
	clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	w.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	if c := waitCount(t, w, func(c pool.Count) bool { return c.Unknown == "" }); c.Unknown != "" {
		t.Fatalf("never synced: %+v", c)
	}
	// The connection breaks: the watch ends, and every call after fails.
	broken.Store(true)
	first.Load().Stop()
	waitFor(t, "the watch's first failure", func() bool { _, err := w.informers[0].failing(); return err != nil })
	failedAt := clock
	if c := w.Count(ctx, pool.Scope{IPv4: true}); c.Unknown != "" {
		t.Errorf("just after the watch broke: %+v, want the held data counted", c)
	}
	advance(time.Minute)
	want := "calico-ipam: the watch of ipamblocks.crd.projectcalico.org has failed since " + failedAt.Format(time.RFC3339) +
		", so what the sidecar holds of it is stale: " + refused.Error()
	if c := w.Count(ctx, pool.Scope{IPv4: true}); c.Unknown != want || c.Exhausted(1) != nil {
		t.Errorf("a minute after the watch broke: %+v, want can't tell: %s", c, want)
	}
	if w.Syncing() {
		t.Error("stale data is an answer (can't tell), but Syncing() = true")
	}
	broken.Store(false)
	waitCount(t, w, func(c pool.Count) bool { return c.Unknown == "" })
	if c := w.Count(ctx, pool.Scope{IPv4: true}); c.Unknown != "" {
		t.Errorf("after the watch is back: %+v, want counted", c)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
