package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
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
	"github.com/netready/netready/pkg/nodewriter"
)

// TestAgentPoolTaint: a Cilium pool (a stand-in agent on a unix socket)
// taints the node when Cilium's count leaves fewer than minFree, lifts
// it when pods go, and an agent that stops answering cannot tell: no
// taint, one NetreadyPoolUnknown Event for the cause, and the metric.
func TestAgentPoolTaint(t *testing.T) {
	var status atomic.Value
	status.Store("IPv4: 14/14 allocated from 10.200.95.0/28, ")
	var down atomic.Bool
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"ipam": map[string]any{"status": status.Load().(string)}})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	confDir := t.TempDir()
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"cilium","plugins":[{"type":"cilium-cni"},{"type":"netready","status":{"ipam":{"type":"cilium","socket":"unix://%s"}}}]}`, sock)
	os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(conf), 0o644)
	m := metrics.New(prometheus.NewRegistry())
	rec := events.NewFakeRecorder(10)
	w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute}, kubeapitest.Fake{C: client}, rec,
		slog.New(slog.NewTextHandler(io.Discard, nil)), m, health.New())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tainted := func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && nodewriter.Has(n)
	}
	waitUntil(t, "the taint at Cilium's 14 of 14", tainted)
	wantEvent(t, rec, "Warning PodIPsExhausted", `cilium (cilium): 14 of 14 addresses in use in 10.200.95.0/28 (minFree 1)`)
	if got := testutil.ToFloat64(m.PoolAddresses.WithLabelValues("cilium", "cilium", "capacity")); got != 14 {
		t.Errorf(`netready_pool_addresses{state="capacity"} = %v, want 14`, got)
	}
	status.Store("IPv4: 11/14 allocated from 10.200.95.0/28, ")
	waitUntil(t, "the taint lifted at 11 of 14 (polled: no inotify)", func() bool { return !tainted() })
	wantEvent(t, rec, "Normal PodIPsAvailable")

	status.Store("IPv4: 14/14 allocated from 10.200.95.0/28, ")
	down.Store(true)
	waitUntil(t, "the unknown metric", func() bool { return testutil.ToFloat64(m.PoolUnknown.WithLabelValues("cilium", "cilium")) == 1 })
	wantEvent(t, rec, "Warning NetreadyPoolUnknown", "network cilium: netready cannot tell whether its IP pool (cilium) is exhausted", "503 Service Unavailable")
	time.Sleep(agentPoll + time.Second)
	if tainted() {
		t.Error("a pool that cannot tell tainted the node")
	}
	select {
	case e := <-rec.Events:
		if strings.Contains(e, "NetreadyPoolUnknown") {
			t.Errorf("a second Event for the same cause: %q", e)
		}
	default:
	}
}
