package watch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// fakeCluster is a ClusterSource whose count the test sets.
type fakeCluster struct {
	typ     string
	mu      sync.Mutex
	cnt     pool.Count
	syncing bool
}

func (f *fakeCluster) Type() string { return f.typ }
func (f *fakeCluster) Syncing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncing
}
func (f *fakeCluster) Count(context.Context, pool.Scope) pool.Count {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cnt
}
func (f *fakeCluster) set(c pool.Count) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cnt, f.syncing = c, false
}

// startSync makes the source cannot tell as one whose watches are listing.
func (f *fakeCluster) startSync(why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cnt, f.syncing = pool.Count{Unknown: why}, true
}

// TestClusterPoolTaint: a pool whose truth is in the API server is
// counted by its ClusterSource, asked for by type: it taints the node
// when short and lifts the taint when not, and each count is kept as the
// verdict that STATUS reads from the entry's stateDir. A source that
// cannot tell never taints, and its verdict says so.
func TestClusterPoolTaint(t *testing.T) {
	src := &fakeCluster{typ: "ovn-kubernetes"}
	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}, Said: "ovn-kubernetes: 4 pods", ClusterFull: true})
	var asked []string
	clusters := func(typ string) (ClusterSource, error) {
		asked = append(asked, typ)
		if typ != "ovn-kubernetes" {
			return nil, fmt.Errorf("no %s here", typ)
		}
		return src, nil
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	confDir, stateDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-ovn.conflist"), []byte(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto"}}]}`), 0o644)
	m := metrics.New(prometheus.NewRegistry())
	rec := events.NewFakeRecorder(10)
	w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute, Clusters: clusters}, kubeapitest.Fake{C: client}, rec,
		slog.New(slog.NewTextHandler(io.Discard, nil)), m, health.New())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tainted := func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && nodewriter.Has(n)
	}
	verdict := func() pool.Count {
		return pool.ReadVerdict(pool.VerdictPath(stateDir, "ovn"), "ovn-kubernetes", time.Now())
	}

	waitUntil(t, "the taint at 4 of 4", tainted)
	wantEvent(t, rec, "Warning PodIPsExhausted", "ovn (ovn-kubernetes): 4 of 4 addresses in use")
	if err := verdict().Exhausted(1); err == nil {
		t.Errorf("the verdict for STATUS is not exhausted: %+v", verdict())
	}
	if got := testutil.ToFloat64(m.PoolAddresses.WithLabelValues("ovn", "ovn-kubernetes", "capacity")); got != 4 {
		t.Errorf(`netready_pool_addresses{state="capacity"} = %v, want 4`, got)
	}
	if got := testutil.ToFloat64(m.PoolFull.WithLabelValues("ovn", "ovn-kubernetes")); got != 1 {
		t.Errorf("netready_pool_cluster_full = %v, want 1 while the source says full cluster-wide", got)
	}

	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 2}}})
	waitUntil(t, "the taint lifted at 2 of 4 (polled; one of hysteresis)", func() bool { return !tainted() })
	waitUntil(t, "the verdict at 2 of 4", func() bool { v := verdict(); return len(v.Ranges) == 1 && v.Ranges[0].Used == 2 })
	if got := testutil.ToFloat64(m.PoolFull.WithLabelValues("ovn", "ovn-kubernetes")); got != 0 {
		t.Errorf("netready_pool_cluster_full = %v at 2 of 4, want 0", got)
	}

	src.set(pool.Count{Unknown: "ovn-kubernetes: the node's pods have not been listed yet", Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}})
	wantEvent(t, rec, "Normal PodIPsAvailable")
	waitUntil(t, "a verdict that cannot tell", func() bool { return verdict().Unknown != "" })
	wantEvent(t, rec, "Warning NetreadyPoolUnknown", "network ovn: netready cannot tell whether its IP pool (ovn-kubernetes) is exhausted", "not been listed yet")
	time.Sleep(agentPoll + time.Second)
	if tainted() {
		t.Error("a pool that cannot tell tainted the node")
	}
	if verdict().Exhausted(1) != nil {
		t.Error("a verdict that cannot tell is exhausted")
	}
	for _, typ := range asked {
		if typ != "ovn-kubernetes" {
			t.Errorf("asked for a %s source, which no network uses", typ)
		}
	}
}

// TestClusterPoolNoSource: a source that cannot be made here cannot
// tell, saying why, and so does its verdict.
func TestClusterPoolNoSource(t *testing.T) {
	confDir, stateDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-k8s-pod-network.conflist"), []byte(`{"cniVersion":"1.1.0","name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto","poolAction":"notready"}}]}`), 0o644)
	nets, _, err := pool.AllNetworks(confDir)
	if err != nil || len(nets) != 1 {
		t.Fatal(nets, err)
	}
	w := New(Config{ConfDir: confDir, Node: node}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	cnt, _, err := w.count(nets[0], time.Now())
	want := "this netready-sidecar cannot count a calico-ipam pool: it was started without an API server client for it"
	if err != nil || cnt.Unknown != want {
		t.Errorf("count = %+v, %v; want cannot tell: %s", cnt, err, want)
	}
	if v := pool.ReadVerdict(pool.VerdictPath(stateDir, "k8s-pod-network"), "calico-ipam", time.Now()); v.Unknown != want {
		t.Errorf("verdict = %+v, want cannot tell: %s", v, want)
	}
}

// TestClusterPoolSyncGrace: a source still syncing (its watches listing,
// as after a sidecar restart) writes no verdict, so that STATUS keeps the
// last one rather than turning green, for as long as it syncs, up to
// clusterSyncLimit. A source that has synced, or failed for good, cannot
// tell at once, and its verdict says so. (The taint is held either way:
// TestCantTellHoldsTheTaint.)
func TestClusterPoolSyncGrace(t *testing.T) {
	confDir, stateDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-ovn.conflist"), []byte(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto"}}]}`), 0o644)
	nets, _, err := pool.AllNetworks(confDir)
	if err != nil || len(nets) != 1 {
		t.Fatal(nets, err)
	}
	verdictPath := pool.VerdictPath(stateDir, "ovn")
	now := time.Now()
	// The verdict a sidecar wrote before it restarted: exhausted.
	full := pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}}
	if err := pool.WriteVerdict(verdictPath, "ovn-kubernetes", full, now); err != nil {
		t.Fatal(err)
	}
	src := &fakeCluster{typ: "ovn-kubernetes"}
	src.startSync("ovn-kubernetes: the Node has not been read yet")
	newWatch := func() *Watcher {
		w := New(Config{ConfDir: confDir, Node: node, Clusters: func(string) (ClusterSource, error) { return src, nil }}, nil, nil,
			slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
		w.now = func() time.Time { return now }
		return w
	}
	w := newWatch()
	unsure := func() bool {
		_, _, err := w.count(nets[0], now)
		return err != nil
	}
	verdictExhausted := func() bool {
		return pool.ReadVerdict(verdictPath, "ovn-kubernetes", now).Exhausted(1) != nil
	}
	if !unsure() {
		t.Error("a source that is syncing is not counted as syncing")
	}
	if !verdictExhausted() {
		t.Error("a source that is syncing overwrote STATUS's exhausted verdict")
	}
	now = now.Add(clusterSyncLimit - time.Second)
	if !unsure() {
		t.Error("a source still syncing (a slow first list) stops keeping STATUS's verdict before clusterSyncLimit")
	}
	now = now.Add(2 * time.Second)
	if unsure() {
		t.Error("a source that never syncs keeps STATUS's verdict past clusterSyncLimit")
	}
	if v := pool.ReadVerdict(verdictPath, "ovn-kubernetes", now); v.Unknown == "" {
		t.Errorf("past clusterSyncLimit the verdict = %+v, want cannot tell", v)
	}

	w = newWatch()
	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 1}}})
	if unsure() {
		t.Error("a count that can tell is unsure")
	}
	src.set(pool.Count{Unknown: "ovn-kubernetes: get node n1: forbidden"})
	if unsure() {
		t.Error("a source that has synced is counted as syncing when it cannot tell")
	}
	if v := pool.ReadVerdict(verdictPath, "ovn-kubernetes", now); v.Unknown == "" {
		t.Errorf("verdict = %+v, want cannot tell", v)
	}
}

// TestSourceSeriesGoWithTheirNetwork: a network's per-source series
// (netready_pool_addresses, _unknown, _cluster_full) stay while it is
// counted, also while its entry is held after leaving the config, and go
// once it is forgotten, so that no alert outlives its pool.
func TestSourceSeriesGoWithTheirNetwork(t *testing.T) {
	confDir, stateDir := t.TempDir(), t.TempDir()
	conf := filepath.Join(confDir, "10-ovn.conflist")
	os.WriteFile(conf, []byte(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto"}}]}`), 0o644)
	src := &fakeCluster{typ: "ovn-kubernetes"}
	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}, ClusterFull: true})
	m := metrics.New(prometheus.NewRegistry())
	w := New(Config{ConfDir: confDir, Node: node, ForgetAfter: time.Minute, Clusters: func(string) (ClusterSource, error) { return src, nil }}, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), m, health.New())
	clock := time.Now()
	w.now = func() time.Time { return clock }
	untainted := false
	w.seeded, w.applied = &untainted, &untainted // as reconcile seeds them from the Node
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fsw.Close()
	series := func() [3]int {
		return [3]int{testutil.CollectAndCount(m.PoolAddresses), testutil.CollectAndCount(m.PoolUnknown), testutil.CollectAndCount(m.PoolFull)}
	}
	w.judge(fsw, true)
	if got := series(); got != [3]int{3, 1, 1} {
		t.Errorf("counted: series (addresses, unknown, cluster full) = %v, want [3 1 1]", got)
	}
	os.Remove(conf)
	w.judge(fsw, true)
	if got := series(); got != [3]int{3, 1, 1} {
		t.Errorf("held after its entry left: series = %v, want [3 1 1]", got)
	}
	clock = clock.Add(2 * time.Minute)
	w.judge(fsw, true)
	if got := series(); got != [3]int{} {
		t.Errorf("forgotten: series = %v, want none", got)
	}
}

// releasingCluster is a fakeCluster that counts its releases.
type releasingCluster struct {
	*fakeCluster
	released int
}

func (r *releasingCluster) Release() { r.released++ }

// TestForgottenNetworkReleasesItsSource: once a network is forgotten, the
// watch keeps nothing of it (its verdict, hysteresis, can't tell note,
// hold) and releases the ClusterSource no other network counts from, so
// that its cluster-wide watches stop; a network that needs it again gets
// a new one.
func TestForgottenNetworkReleasesItsSource(t *testing.T) {
	// A stateDir under a file: no verdict can be kept, which is noted.
	confDir, notDir := t.TempDir(), filepath.Join(t.TempDir(), "file")
	os.WriteFile(notDir, nil, 0o644)
	stateDir := filepath.Join(notDir, "state")
	conf := func(name string) string {
		return filepath.Join(confDir, "10-"+name+".conflist")
	}
	write := func(name string) {
		os.WriteFile(conf(name), []byte(`{"cniVersion":"1.1.0","name":"`+name+`","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto"}}]}`), 0o644)
	}
	write("a")
	write("b")
	var made []*releasingCluster
	clusters := func(typ string) (ClusterSource, error) {
		if len(made) == 0 || made[len(made)-1].released > 0 {
			made = append(made, &releasingCluster{fakeCluster: &fakeCluster{typ: typ}})
			made[len(made)-1].set(pool.Count{Unknown: "calico-ipam: the watch of ipamblocks has failed"})
		}
		return made[len(made)-1], nil
	}
	w := New(Config{ConfDir: confDir, Node: node, ForgetAfter: time.Minute, Clusters: clusters}, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	clock := time.Now()
	w.now = func() time.Time { return clock }
	untainted := false
	w.seeded, w.applied = &untainted, &untainted
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer fsw.Close()
	kept := func() []int {
		return []int{len(w.memos), len(w.unknown), len(w.verdict), len(w.held), len(w.verdictErr), len(w.short), len(w.made), len(w.clusterSince)}
	}
	w.judge(fsw, true)
	if diff := cmp.Diff([]int{0, 2, 2, 2, 2, 0, 1, 1}, kept()); diff != "" {
		t.Errorf("two networks held (memos, unknown, verdict, held, verdictErr, short, made, clusterSince) (-want +got):\n%s", diff)
	}
	os.Remove(conf("a"))
	w.judge(fsw, true)
	clock = clock.Add(2 * time.Minute)
	w.judge(fsw, true)
	if diff := cmp.Diff([]int{0, 1, 1, 1, 1, 0, 1, 1}, kept()); diff != "" {
		t.Errorf("a forgotten, b counted (-want +got):\n%s", diff)
	}
	if made[0].released != 0 {
		t.Errorf("the source was released while b still counts from it")
	}
	os.Remove(conf("b"))
	w.judge(fsw, true)
	clock = clock.Add(2 * time.Minute)
	w.judge(fsw, true)
	if diff := cmp.Diff([]int{0, 0, 0, 0, 0, 0, 0, 0}, kept()); diff != "" {
		t.Errorf("both forgotten (-want +got):\n%s", diff)
	}
	if made[0].released != 1 {
		t.Errorf("the source no network counts from was released %d times, want once", made[0].released)
	}
	write("c")
	w.judge(fsw, true)
	if len(made) != 2 || made[1].released != 0 || len(w.made) != 1 {
		t.Errorf("a network that needs the source again: %d sources made, want a new one", len(made))
	}
}
