package poolwatch

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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/pool"
	"github.com/netready/netready/pkg/taint"
)

// fakeCluster is a ClusterSource whose count the test sets.
type fakeCluster struct {
	typ string
	mu  sync.Mutex
	cnt pool.Count
}

func (f *fakeCluster) Type() string { return f.typ }
func (f *fakeCluster) Count(context.Context) pool.Count {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cnt
}
func (f *fakeCluster) set(c pool.Count) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cnt = c
}

// TestClusterPoolTaint: a pool whose truth is in the API server is
// counted by its ClusterSource, asked for by type: it taints the node
// when short and lifts the taint when not, and each count is kept as the
// verdict that STATUS reads from the entry's stateDir. A source that
// cannot tell never taints, and its verdict says so.
func TestClusterPoolTaint(t *testing.T) {
	src := &fakeCluster{typ: "ovn-kubernetes"}
	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 4}}, Said: "ovn-kubernetes: 4 pods"})
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
		return err == nil && taint.Has(n)
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

	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 2}}})
	waitUntil(t, "the taint lifted at 2 of 4 (polled; one of hysteresis)", func() bool { return !tainted() })
	waitUntil(t, "the verdict at 2 of 4", func() bool { v := verdict(); return len(v.Ranges) == 1 && v.Ranges[0].Used == 2 })

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

// TestClusterPoolSyncGrace: a source that has not counted yet (its
// watches still listing, as after a sidecar restart) holds the taint as
// it is for clusterSyncGrace instead of lifting it; after the grace, or
// once it has counted, cannot tell is cannot tell.
func TestClusterPoolSyncGrace(t *testing.T) {
	confDir, stateDir := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(confDir, "10-ovn.conflist"), []byte(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":"`+stateDir+`","status":{"ipam":"auto"}}]}`), 0o644)
	nets, _, err := pool.AllNetworks(confDir)
	if err != nil || len(nets) != 1 {
		t.Fatal(nets, err)
	}
	src := &fakeCluster{typ: "ovn-kubernetes"}
	syncing := pool.Count{Unknown: "ovn-kubernetes: the Node has not been read yet"}
	src.set(syncing)
	now := time.Now()
	w := New(Config{ConfDir: confDir, Node: node, Clusters: func(string) (ClusterSource, error) { return src, nil }}, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	w.now = func() time.Time { return now }
	unsure := func() bool {
		_, _, err := w.count(nets[0], now)
		return err != nil
	}
	if !unsure() {
		t.Error("a source that has not counted yet lifts the taint at once")
	}
	now = now.Add(clusterSyncGrace + time.Second)
	if unsure() {
		t.Error("a source that never counts holds the taint past the grace")
	}
	w = New(Config{ConfDir: confDir, Node: node, Clusters: func(string) (ClusterSource, error) { return src, nil }}, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	w.now = func() time.Time { return now }
	src.set(pool.Count{Ranges: []pool.Range{{Set: "10.244.1.0/29", Usable: big.NewInt(4), Used: 1}}})
	if unsure() {
		t.Error("a count that can tell is unsure")
	}
	src.set(syncing)
	if unsure() {
		t.Error("a source that has counted before holds the taint when it cannot tell")
	}
}
