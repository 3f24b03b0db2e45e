package calicotest

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"

	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/pool/calico"
)

// The writer's objects read back as calico-ipam's: the watcher counts
// what it claimed, assigned and released. (The real API server test is
// in test/integration.)
func TestWriterAllocatesAsCalicoIPAM(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		calico.IPAMBlocks: "IPAMBlockList", calico.BlockAffinities: "BlockAffinityList",
		calico.IPAMConfigs: "IPAMConfigList", calico.IPPools: "IPPoolList",
	}, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": "n1"}}})
	w := &Writer{Dynamic: dyn}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.SetConfig(ctx, Config{StrictAffinity: true, AutoAllocateBlocks: true, CooldownSeconds: 3600}))
	must(w.SetPool(ctx, Pool{Name: "p", CIDR: "10.0.0.0/28", BlockSize: 28}))
	must(w.Claim(ctx, "n1", "10.0.0.0/28"))
	if n, err := w.Assign(ctx, "10.0.0.0/28", "n1", 20); err != nil || n != 16 {
		t.Fatalf("Assign 20 into a /28: took %d (%v), want 16", n, err)
	}
	must(w.Release(ctx, "10.0.0.0/28", 3, true))
	must(w.Release(ctx, "10.0.0.0/28", 2, false))

	cw := calico.New(calico.Options{Dynamic: dyn, Node: "n1"})
	go cw.Run(ctx)
	var c pool.Count
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c = cw.Count(ctx, pool.Scope{IPv4: true}); c.Unknown == "" {
			break
		}
	}
	want := []pool.Range{{Set: "IPv4", Usable: big.NewInt(16), Used: 11, Cooling: 3}}
	if d := cmp.Diff(want, c.Ranges, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); d != "" {
		t.Errorf("Ranges (-want +got):\n%s\n%+v", d, c)
	}
	if c.Grows || !strings.Contains(c.Said, "2 of 16 free in 1 affine block") {
		t.Errorf("got %+v", c)
	}
}
