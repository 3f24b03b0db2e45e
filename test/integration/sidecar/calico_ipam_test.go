//go:build integration

package sidecar

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/pool/calico"
	"github.com/netready/netready/pkg/pool/calico/calicotest"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// applyCalicoCRDs declares Calico's four IPAM kinds on a
// (test/fixtures/calico/crds.yaml) and waits until they are served.
func applyCalicoCRDs(t testing.TB, a *kube.APIServer) {
	t.Helper()
	for _, args := range [][]string{
		{"apply", "-f", harness.RepoPath("test", "fixtures", "calico", "crds.yaml")},
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/ipamblocks.crd.projectcalico.org", "crd/blockaffinities.crd.projectcalico.org", "crd/ipamconfigs.crd.projectcalico.org", "crd/ippools.crd.projectcalico.org"},
	} {
		if out, err := a.KubectlRun(args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// applyCalicoRBAC applies what deploy/components/calico grants the sidecar.
func applyCalicoRBAC(t testing.TB, a *kube.APIServer) {
	t.Helper()
	if out, err := a.KubectlRun("apply", "-f", harness.RepoPath("deploy", "components", "calico", "rbac.yaml")); err != nil {
		t.Fatalf("apply deploy/components/calico/rbac.yaml: %v\n%s", err, out)
	}
}

// countUntil polls the watcher until ok holds, for up to a minute, and
// returns the last count.
func countUntil(t *testing.T, w *calico.Watcher, what string, ok func(pool.Count) bool) pool.Count {
	t.Helper()
	var c pool.Count
	for start := time.Now(); time.Since(start) < time.Minute; time.Sleep(100 * time.Millisecond) {
		if c = w.Count(context.Background(), pool.Scope{IPv4: true, IPv6: true}); ok(c) {
			return c
		}
	}
	t.Fatalf("%s: not within a minute; last count %+v", what, c)
	return c
}

// TestCalicoIPAMCountsByCalicoRules: the watcher, as the sidecar's
// ServiceAccount with deploy/components/calico's RBAC, counts a node's
// pool on a real API server holding Calico's IPAM kinds, written the way
// calico-ipam writes them, through the four cases of calico-ipam's
// auto-assign: the affine block filling up, the per-node block limit,
// borrowing from other nodes' blocks (strictAffinity off, and not on),
// and released addresses in their cooldown.
func TestCalicoIPAMCountsByCalicoRules(t *testing.T) {
	a := kube.StartAPIServer(t)
	applyCalicoCRDs(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"n1", "n2"} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"pool": "a"}}}
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	admin := calicotest.Writer{Dynamic: dynamic.NewForConfigOrDie(a.Config(kube.AdminToken))}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	assign := func(cidr, node string, n int) {
		t.Helper()
		if took, err := admin.Assign(ctx, cidr, node, n); err != nil || took != n {
			t.Fatalf("assign %d in %s: took %d, %v", n, cidr, took, err)
		}
	}
	// Four /28 blocks of 16 in the pool.
	const b0, b1, b2, b3 = "10.10.0.0/28", "10.10.0.16/28", "10.10.0.32/28", "10.10.0.48/28"
	must(admin.SetPool(ctx, calicotest.Pool{Name: "pool-a", CIDR: "10.10.0.0/26", BlockSize: 28, NodeSelector: "pool == 'a'"}))
	must(admin.SetPool(ctx, calicotest.Pool{Name: "elsewhere", CIDR: "10.20.0.0/16", BlockSize: 26, NodeSelector: "pool == 'b'"}))
	must(admin.SetPool(ctx, calicotest.Pool{Name: "retired", CIDR: "10.30.0.0/16", BlockSize: 26, Disabled: true}))
	must(admin.SetConfig(ctx, calicotest.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 2, CooldownSeconds: 3600}))

	// As the sidecar: without the component's RBAC it cannot tell, and
	// says what to add.
	w := calico.New(calico.Options{Dynamic: dynamic.NewForConfigOrDie(a.AgentConfig), Node: "n1"})
	go w.Run(ctx)
	c := countUntil(t, w, "forbidden without deploy/components/calico", func(c pool.Count) bool { return strings.Contains(c.Unknown, "deploy/components/calico") })
	if c.Exhausted(1) != nil {
		t.Errorf("cannot tell must not be exhausted: %+v", c)
	}
	applyCalicoRBAC(t, a)
	countUntil(t, w, "synced with the component's RBAC", func(c pool.Count) bool { return c.Unknown == "" })

	// The CNI config's ipv4_pools: a named pool is taken whatever its
	// nodeSelector; one that is not there cannot tell.
	if c := w.Count(ctx, pool.Scope{IPv4: true, IPv4Pools: []string{"elsewhere"}}); c.Unknown != "" || !c.Grows || !strings.Contains(c.Said, "can claim a block of elsewhere") {
		t.Errorf("ipv4_pools [elsewhere]: want elsewhere counted, can grow; got %+v", c)
	}
	if c := w.Count(ctx, pool.Scope{IPv4: true, IPv4Pools: []string{"10.99.0.0/16"}}); !strings.Contains(c.Unknown, `pool "10.99.0.0/16" is not an IPPool`) {
		t.Errorf("ipv4_pools naming no pool: want cannot tell; got %+v", c)
	}

	used := func(c pool.Count) int64 { r, _ := c.Tightest(); return r.Used }
	free := func(c pool.Count) int64 { r, _ := c.Tightest(); return r.Free().Int64() }

	// The affine block filling up: while a block is free in the pool, a
	// full affine block is not exhausted.
	must(admin.Claim(ctx, "n1", b0))
	assign(b0, "n1", 12)
	c = countUntil(t, w, "12 used in b0", func(c pool.Count) bool { return used(c) == 12 })
	if free(c) != 4 || !c.Grows || c.Exhausted(5) != nil {
		t.Errorf("b0 12/16, blocks free: want 4 free, can grow, not exhausted; got %+v", c)
	}
	assign(b0, "n1", 4)
	c = countUntil(t, w, "b0 full", func(c pool.Count) bool { return used(c) == 16 })
	if !c.Grows || c.Exhausted(1) != nil || !strings.Contains(c.Said, "can claim a block of pool-a (1 of 2 blocks)") {
		t.Errorf("b0 full, a block free: want can grow; got %+v", c)
	}

	// The block limit (maxBlocksPerHost 2): the node's second block full
	// and two blocks still free in the pool: exhausted.
	must(admin.Claim(ctx, "n1", b1))
	assign(b1, "n1", 16)
	c = countUntil(t, w, "b0 and b1 full", func(c pool.Count) bool { return used(c) == 32 })
	if c.Grows || c.Exhausted(1) == nil || !strings.Contains(c.Said, "block limit 2 reached") {
		t.Errorf("two blocks full at the limit of 2: want exhausted, block limit in Said; got %+v, %v", c, c.Exhausted(1))
	}

	// Borrowing: n2 claims the last blocks and leaves 6 free; with
	// strictAffinity off and the limit raised n1 borrows them, with it on
	// it cannot.
	must(admin.Claim(ctx, "n2", b2))
	must(admin.Claim(ctx, "n2", b3))
	assign(b2, "n2", 10)
	assign(b3, "n2", 16)
	must(admin.SetConfig(ctx, calicotest.Config{StrictAffinity: false, AutoAllocateBlocks: true, MaxBlocksPerHost: 4, CooldownSeconds: 3600}))
	c = countUntil(t, w, "borrowing", func(c pool.Count) bool { return c.Grows })
	if c.Exhausted(1) != nil || !strings.Contains(c.Said, "6 free to borrow from other nodes' blocks") {
		t.Errorf("strictAffinity off, n2 has 6 free: want not exhausted; got %+v", c)
	}
	must(admin.SetConfig(ctx, calicotest.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 4, CooldownSeconds: 3600}))
	c = countUntil(t, w, "no borrowing with strictAffinity", func(c pool.Count) bool { return !c.Grows })
	if c.Exhausted(1) == nil || !strings.Contains(c.Said, "strictAffinity on") {
		t.Errorf("strictAffinity on: want exhausted; got %+v", c)
	}
	assign(b2, "n2", 6)
	c = countUntil(t, w, "every block full", func(c pool.Count) bool { return strings.Contains(c.Said, calico.ClusterFull) })
	if c.Exhausted(1) == nil {
		t.Errorf("every block full: want exhausted; got %+v", c)
	}

	// Cooldown: released addresses still cooling are not free; released
	// without a cooldown they are.
	must(admin.Release(ctx, b0, 3, true))
	c = countUntil(t, w, "3 cooling", func(c pool.Count) bool { r, _ := c.Tightest(); return r.Cooling == 3 })
	if free(c) != 0 || c.Exhausted(1) == nil {
		t.Errorf("3 released, cooling: want none free, exhausted; got %+v", c)
	}
	must(admin.Release(ctx, b1, 2, false))
	c = countUntil(t, w, "2 free", func(c pool.Count) bool { return free(c) == 2 })
	if c.Exhausted(1) != nil || c.Exhausted(3) == nil || strings.Contains(c.Said, calico.ClusterFull) {
		t.Errorf("2 free, 3 cooling: want not exhausted at minFree 1, exhausted at 3; got %+v", c)
	}
	if !strings.Contains(c.Said, "IPv4: 2 of 32 free in 2 affine blocks (3 cooling down)") {
		t.Errorf("Said = %q", c.Said)
	}
}

// TestCalicoIPAMTaintsTheNode: the real netready-sidecar, for a network
// whose status source is calico-ipam, picked by "auto" from Calico's CNI
// config, with deploy/components/calico's RBAC: the node is tainted when
// its affine block is full at the block limit, and untainted when
// addresses are released. The config's ipv4_pools names the one pool,
// which no nodeSelector gives the node: only with the key copied is there
// a pool to count.
func TestCalicoIPAMTaintsTheNode(t *testing.T) {
	a := kube.StartAPIServer(t)
	applyCalicoCRDs(t, a)
	applyCalicoRBAC(t, a)
	ctx := context.Background()
	const node, block = "node-calico", "10.40.0.0/28"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := calicotest.Writer{Dynamic: dynamic.NewForConfigOrDie(a.Config(kube.AdminToken))}
	for _, err := range []error{
		admin.SetPool(ctx, calicotest.Pool{Name: "pool", CIDR: "10.40.0.0/24", BlockSize: 28, NodeSelector: "!all()"}),
		admin.SetConfig(ctx, calicotest.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 1}),
		admin.Claim(ctx, node, block),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Assign(ctx, block, node, 10); err != nil {
		t.Fatal(err)
	}
	confDir := t.TempDir()
	writeNetwork(t, confDir, "10-k8s-pod-network.conflist", "k8s-pod-network", `{"type":"calico-ipam","assign_ipv4":"true","ipv4_pools":["pool"]}`, `{"ipam":"auto","minFree":2}`)
	_, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, t.TempDir(), node, "--cni-conf-dir", confDir, "--pool-resync", "2s")
	defer stop()

	never(t, "tainted with 6 of 16 free", 5*time.Second, func() bool { return !nodewriter.Has(a.Node(t, node)) })
	if _, err := admin.Assign(ctx, block, node, 5); err != nil {
		t.Fatal(err)
	}
	harness.Within(t, "the taint once 1 of 16 is free at the block limit", time.Minute, func() bool { return nodewriter.Has(a.Node(t, node)) })
	if c := nodewriter.Current(a.Node(t, node)); c == nil || !strings.Contains(c.Message, "k8s-pod-network (calico-ipam): 15 of 16 addresses in use") {
		t.Errorf("condition = %+v, want calico-ipam's count of the node's block", c)
	}
	if err := admin.Release(ctx, block, 8, false); err != nil {
		t.Fatal(err)
	}
	harness.Within(t, "the taint gone once 9 are free", time.Minute, func() bool { return !nodewriter.Has(a.Node(t, node)) })
}

// TestCalicoIPAMStaleWhileTheAPIServerIsDown: the watcher, synced on a
// real API server, keeps counting what it holds when the API server dies,
// but only for StaleAfter: then it can't tell, naming the watch and since
// when, rather than counting old blocks as fresh (the sidecar would stamp
// that verdict now, and STATUS trust it). Once the API server is back it
// counts again.
func TestCalicoIPAMStaleWhileTheAPIServerIsDown(t *testing.T) {
	a := kube.StartAPIServer(t)
	applyCalicoCRDs(t, a)
	applyCalicoRBAC(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node, block = "n1", "10.50.0.0/28"
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	admin := calicotest.Writer{Dynamic: dynamic.NewForConfigOrDie(a.Config(kube.AdminToken))}
	for _, err := range []error{
		admin.SetPool(ctx, calicotest.Pool{Name: "pool", CIDR: "10.50.0.0/24", BlockSize: 28}),
		admin.SetConfig(ctx, calicotest.Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 1}),
		admin.Claim(ctx, node, block),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.Assign(ctx, block, node, 16); err != nil {
		t.Fatal(err)
	}
	const stale = 5 * time.Second
	w := calico.New(calico.Options{Dynamic: dynamic.NewForConfigOrDie(a.AgentConfig), Node: node, StaleAfter: stale})
	go w.Run(ctx)
	countUntil(t, w, "16 of 16 counted", func(c pool.Count) bool { r, ok := c.Tightest(); return c.Unknown == "" && ok && r.Used == 16 })

	a.StopAPI()
	down := time.Now()
	c := countUntil(t, w, "can't tell once the data is stale", func(c pool.Count) bool { return c.Unknown != "" })
	t.Logf("can't tell %v after the API server died: %s", time.Since(down).Round(100*time.Millisecond), c.Unknown)
	if !strings.Contains(c.Unknown, "calico-ipam: the watch of ") || !strings.Contains(c.Unknown, "has failed since ") || !strings.Contains(c.Unknown, "is stale") {
		t.Errorf("can't tell = %q, want it to name the failing watch and since when", c.Unknown)
	}
	if c.Exhausted(1) != nil || w.Syncing() {
		t.Errorf("stale: exhausted %v, syncing %v; want neither (an answer: can't tell)", c.Exhausted(1), w.Syncing())
	}
	a.StartAPI()
	countUntil(t, w, "counted again once the API server is back", func(c pool.Count) bool { r, ok := c.Tightest(); return c.Unknown == "" && ok && r.Used == 16 })
}
