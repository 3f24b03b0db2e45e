package watch

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
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
	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pool"
)

const node = "node-a"

// TestPoolWatchRestartsAndReportsHealth: when no inotify instance can be
// had (the limit is the host's), the pool watch does not die quietly:
// /healthz fails naming it, it is tried again, and once it runs /healthz
// is ok and a short pool taints the node.
func TestPoolWatchRestartsAndReportsHealth(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	confDir, data := t.TempDir(), t.TempDir()
	ipam := fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/29"}]],"dataDir":%q}`, data)
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"edge","plugins":[{"type":"bridge","ipam":%s},{"type":"netready","status":{"ipam":"auto","minFree":2}}]}`, ipam)
	if err := os.WriteFile(filepath.Join(confDir, "10-edge.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(data, "edge"), 0o755)
	for _, ip := range []string{"10.77.0.2", "10.77.0.3", "10.77.0.4", "10.77.0.5"} {
		os.WriteFile(filepath.Join(data, "edge", ip), nil, 0o644)
	}
	h := health.New()
	o := Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute}
	rec := events.NewFakeRecorder(10)
	w := New(o, kubeapitest.Fake{C: client}, rec, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), h)
	var failures atomic.Int32
	release := make(chan struct{})
	w.newWatcher = func() (*fsnotify.Watcher, error) {
		if failures.Add(1) == 1 {
			return nil, syscall.EMFILE
		}
		<-release
		return fsnotify.NewWatcher()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	healthz := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	waitUntil(t, "the second attempt", func() bool { return failures.Load() >= 2 })
	if code, body := healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "pool watch: inotify: too many open files") {
		t.Errorf("/healthz while the watch cannot start = %d %q, want 503 naming the pool watch and why", code, body)
	}
	close(release)
	waitUntil(t, "/healthz ok once the watch runs", func() bool { code, _ := healthz(); return code == http.StatusOK })
	tainted := func() bool {
		n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		return err == nil && nodewriter.Has(n)
	}
	waitUntil(t, "the taint for 4 of 5 in use with minFree 2", tainted)
	// The Node's Events: one when the taint goes on and one when it comes
	// off, naming the pool and its counts.
	wantEvent(t, rec, "Warning PodIPsExhausted netready tainted the node netready.io/pod-ips-exhausted:NoSchedule", "edge: 4 of 5 addresses in use")
	os.Remove(filepath.Join(data, "edge", "10.77.0.4"))
	os.Remove(filepath.Join(data, "edge", "10.77.0.5"))
	waitUntil(t, "the taint lifted at 2 of 5 in use", func() bool { return !tainted() })
	wantEvent(t, rec, "Normal PodIPsAvailable netready lifted netready.io/pod-ips-exhausted", "edge: 2 of 5 addresses in use")
}

// wantEvent waits for the recorder's next Event and checks that it
// contains every part.
func wantEvent(t *testing.T, rec *events.FakeRecorder, parts ...string) {
	t.Helper()
	select {
	case e := <-rec.Events:
		for _, p := range parts {
			if !strings.Contains(e, p) {
				t.Errorf("Event %q does not contain %q", e, p)
			}
		}
	case <-time.After(5 * time.Second):
		t.Errorf("no Event containing %q", parts)
	}
}

func waitUntil(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// TestPoolWatchKeepsStatusCount: for a pool that STATUS counts
// (poolAction "notready"), each count after a change is kept where STATUS
// looks first, once the change is a few clock ticks old, with no other
// event to wake the watch. A pool the sidecar taints for, and an entry
// whose stateDir this container does not have, keep nothing.
func TestPoolWatchKeepsStatusCount(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	confDir, data, state := t.TempDir(), t.TempDir(), t.TempDir()
	missing := filepath.Join(t.TempDir(), "not-mounted")
	for _, n := range []struct{ name, subnet, status string }{
		{"edge", "10.77.0.0/28", fmt.Sprintf(`{"ipam":"auto","poolAction":"notready"},"stateDir":%q`, state)},
		{"tainted", "10.78.0.0/28", fmt.Sprintf(`{"ipam":"auto","poolAction":"taint"},"stateDir":%q`, state)},
		{"elsewhere", "10.79.0.0/28", fmt.Sprintf(`{"ipam":"auto","poolAction":"notready"},"stateDir":%q`, missing)},
	} {
		ipam := fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":%q}]],"dataDir":%q}`, n.subnet, data)
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":%q,"plugins":[{"type":"bridge","ipam":%s},{"type":"netready","status":%s}]}`, n.name, ipam, n.status)
		if err := os.WriteFile(filepath.Join(confDir, "10-"+n.name+".conflist"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(data, n.name), 0o755)
	}
	o := Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute}
	w := New(o, kubeapitest.Fake{C: client}, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	kept := func(network string) (used []int64, mtimeNs int64) {
		var c struct {
			MtimeNs int64   `json:"mtimeNs"`
			Used    []int64 `json:"used"`
		}
		b, err := os.ReadFile(pool.CachePath(state, network))
		if err != nil || json.Unmarshal(b, &c) != nil {
			return nil, 0
		}
		return c.Used, c.MtimeNs
	}
	for i, ips := range [][]string{{"10.77.0.2"}, {"10.77.0.3", "10.77.0.4"}} {
		for _, ip := range ips {
			os.WriteFile(filepath.Join(data, "edge", ip), nil, 0o644)
			os.WriteFile(filepath.Join(data, "tainted", strings.Replace(ip, ".77.", ".78.", 1)), nil, 0o644)
			os.WriteFile(filepath.Join(data, "elsewhere", strings.Replace(ip, ".77.", ".79.", 1)), nil, 0o644)
		}
		want := []int64{int64(map[int]int{0: 1, 1: 3}[i])}
		waitUntil(t, fmt.Sprintf("the count %v kept for the folder as it is now", want), func() bool {
			var st syscall.Stat_t
			used, mtime := kept("edge")
			return syscall.Stat(filepath.Join(data, "edge"), &st) == nil && mtime == st.Mtim.Nano() && cmp.Equal(used, want)
		})
	}
	if _, err := os.Stat(pool.CachePath(state, "tainted")); err == nil {
		t.Errorf("a count was kept for a pool with poolAction taint, which STATUS never counts")
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("the watch made %s, an entry's stateDir that this container does not have", missing)
	}
}

// TestCNIStatusActive: netready_cni_status_active says whether runtimes
// call STATUS for the conflist the runtime uses: 0 at a stock 0.3.1, 1 once
// it is raised to 1.1.0.
func TestCNIStatusActive(t *testing.T) {
	confDir := t.TempDir()
	path := filepath.Join(confDir, "10-calico.conflist")
	write := func(v string) {
		conf := fmt.Sprintf(`{"cniVersion":%q,"name":"k8s-pod-network","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"netready"}]}`, v)
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New(prometheus.NewRegistry())
	rec := events.NewFakeRecorder(10)
	w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Minute}, nil, rec,
		slog.New(slog.NewTextHandler(io.Discard, nil)), m, health.New())
	clock := time.Now()
	w.now = func() time.Time { return clock }
	// A Warning Node Event once per file and version, again after a
	// raise and a fall, and again once its last Event would have expired.
	for i, tc := range []struct {
		version string
		later   time.Duration
		want    float64
		event   bool
	}{{"0.3.1", 0, 0, true}, {"0.3.1", time.Minute, 0, false}, {"1.1.0", 0, 1, false}, {"0.3.1", 0, 0, true}, {"0.3.1", kubeapi.RepeatWarningAfter, 0, true}} {
		clock = clock.Add(tc.later)
		write(tc.version)
		w.loadNetworks()
		if got := testutil.ToFloat64(m.CNIStatusActive.WithLabelValues("k8s-pod-network", tc.version)); got != tc.want {
			t.Errorf("%d: cniVersion %s: netready_cni_status_active = %v, want %v", i, tc.version, got, tc.want)
		}
		if n := testutil.CollectAndCount(m.CNIStatusActive); n != 1 {
			t.Errorf("%d: cniVersion %s: %d series, want only the current file's", i, tc.version, n)
		}
		select {
		case e := <-rec.Events:
			if !tc.event || !strings.Contains(e, "Warning "+nodewriter.ReasonStatusInactive) || !strings.Contains(e, "says cniVersion 0.3.1") || !strings.Contains(e, "--cni-version auto") {
				t.Errorf("%d: cniVersion %s: Event %q, want one: %v", i, tc.version, e, tc.event)
			}
		default:
			if tc.event {
				t.Errorf("%d: cniVersion %s: no %s Event", i, tc.version, nodewriter.ReasonStatusInactive)
			}
		}
	}
}
