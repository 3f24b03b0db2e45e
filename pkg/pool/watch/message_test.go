package watch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

// TestConditionMessageReadsBack: the NetworkPoolExhausted message the
// watch writes reads back (pool.ParseLine, as kubectl netready reads
// it) as each network's pool: its source, counts, minFree, and whether it
// is the exhausted one, has room, or can't tell, why, and since when.
func TestConditionMessageReadsBack(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	confDir, data := t.TempDir(), t.TempDir()
	write := func(file, name, subnet string, minFree int, ips ...string) {
		ipam := fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}`, subnet, data)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"bridge","ipam":%s},{"type":"netready","status":{"ipam":"auto","minFree":%d}}]}`, name, ipam, minFree)
		if err := os.WriteFile(filepath.Join(confDir, file), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(data, name), 0o755)
		for _, ip := range ips {
			os.WriteFile(filepath.Join(data, name, ip), nil, 0o644)
		}
	}
	write("10-edge.conflist", "edge", "10.77.0.0/29", 2, "10.77.0.2", "10.77.0.3", "10.77.0.4", "10.77.0.5")
	write("20-wide.conflist", "wide", "10.78.0.0/28", 1, "10.78.0.2")
	// An agent that is not there: can't tell, never exhausted.
	gone := filepath.Join(t.TempDir(), "cilium.sock")
	cilium := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"cilium","plugins":[{"type":"cilium-cni"},{"type":"netready","status":{"ipam":{"type":"cilium","socket":"unix://%s"}}}]}`, gone)
	os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(cilium), 0o644)
	// A pool in the API server whose source has not counted yet: it
	// cannot be counted, and says its source.
	ovn := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ovn","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":%q,"status":{"ipam":"auto"}}]}`, t.TempDir())
	os.WriteFile(filepath.Join(confDir, "30-ovn.conflist"), []byte(ovn), 0o644)
	clusters := func(string) (ClusterSource, error) { return unsynced{}, nil }

	w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute, Clusters: clusters}, kubeapitest.Fake{C: client}, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	var cond *corev1.NodeCondition
	waitUntil(t, "the condition naming the three pools", func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		cond = nodewriter.Current(n)
		return cond != nil && cond.Status == corev1.ConditionTrue && strings.Count(cond.Message, "minFree") == 4 && strings.Contains(cond.Message, "ovn (")
	})
	got := pool.ParseLine(cond.Message)
	if len(got) == 4 && strings.HasPrefix(got[0].Why, "the Cilium agent: ") && strings.Contains(got[0].Why, gone) {
		got[0].Why = "the Cilium agent: ..."
	}
	for i, p := range got {
		// Held since the watch's first count: within this test.
		if p.State == pool.StateUnknown {
			if p.Since.Before(start.Truncate(time.Second)) || p.Since.After(time.Now()) {
				t.Errorf("pool %s held since %v, not since the watch began at %v", p.Network, p.Since, start)
			}
			got[i].Since = time.Time{}
		}
	}
	n := big.NewInt
	want := []pool.Line{
		{Network: "cilium", Source: "cilium", MinFree: 1, State: pool.StateUnknown, Why: "the Cilium agent: ..."},
		{Network: "edge", Source: "host-local", MinFree: 2, State: pool.StateExhausted, Ranges: []pool.LineRange{{Free: n(1), Capacity: n(5), Used: 4}}},
		{Network: "wide", Source: "host-local", MinFree: 1, State: pool.StateRoom, Ranges: []pool.LineRange{{Free: n(12), Capacity: n(13), Used: 1}}},
		{Network: "ovn", Source: "ovn-kubernetes", MinFree: 1, State: pool.StateUnknown,
			Why: "ovn-kubernetes has not counted yet (its watches are listing)"},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b *big.Int) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("ParsePools(%q) (-want +got):\n%s", cond.Message, diff)
	}
}

// unsynced is a ClusterSource whose watches have not listed yet.
type unsynced struct{}

func (unsynced) Type() string  { return "ovn-kubernetes" }
func (unsynced) Syncing() bool { return true }
func (unsynced) Count(context.Context, pool.Scope) pool.Count {
	return pool.Count{Unknown: "its watches are listing"}
}
