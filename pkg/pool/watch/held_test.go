package watch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
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

// A pool's three answers in TestCantTellHoldsTheTaint.
const (
	answerFull = iota
	answerCantTell
	answerRoom
)

// heldSource is one source in TestCantTellHoldsTheTaint: a network's
// conflist, and how to make its source answer full, can't tell or room.
type heldSource struct {
	name string
	// setup writes the conflist into confDir and returns how to set the
	// answer and the clusters the watch is given.
	setup func(t *testing.T, confDir string) (set func(answer int), clusters ClusterSources)
	// why is part of the cause the held message and the Event name.
	why string
	// room is the state its room answer reads back as ("" for room).
	room string
}

func heldSources() []heldSource {
	cluster := func(typ, conf string, syncing bool) func(t *testing.T, confDir string) (func(int), ClusterSources) {
		return func(t *testing.T, confDir string) (func(int), ClusterSources) {
			os.WriteFile(filepath.Join(confDir, "10-net.conflist"), []byte(fmt.Sprintf(conf, t.TempDir())), 0o644)
			src := &fakeCluster{typ: typ}
			set := func(a int) {
				switch a {
				case answerFull:
					src.set(pool.Count{Ranges: []pool.Range{{Set: "IPv4", Usable: big.NewInt(14), Used: 14}}})
				case answerRoom:
					src.set(pool.Count{Ranges: []pool.Range{{Set: "IPv4", Usable: big.NewInt(14), Used: 5}}})
				case answerCantTell:
					if syncing {
						src.startSync("its watches are listing")
					} else {
						src.set(pool.Count{Unknown: typ + ": the watch has failed since 12:00: connection refused"})
					}
				}
			}
			return set, func(string) (ClusterSource, error) { return src, nil }
		}
	}
	return []heldSource{
		{name: "host-local whose dataDir goes", why: "does not exist here",
			setup: func(t *testing.T, confDir string) (func(int), ClusterSources) {
				data := filepath.Join(t.TempDir(), "networks")
				ipam := fmt.Sprintf(`{"type":"host-local","ranges":[[{"subnet":"10.77.0.0/29"}]],"dataDir":%q}`, data)
				os.WriteFile(filepath.Join(confDir, "10-net.conflist"), []byte(`{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"bridge","ipam":`+ipam+`},{"type":"netready","status":{"ipam":"auto"}}]}`), 0o644)
				return func(a int) {
					os.RemoveAll(data)
					if a == answerCantTell {
						return // not mounted, as the sidecar would see it
					}
					os.MkdirAll(filepath.Join(data, "net"), 0o755)
					n := map[int]int{answerFull: 5, answerRoom: 1}[a]
					for i := range n {
						os.WriteFile(filepath.Join(data, "net", fmt.Sprintf("10.77.0.%d", i+2)), nil, 0o644)
					}
				}, nil
			}},
		{name: "cilium answering 503 in its rolling update", why: "503 Service Unavailable",
			setup: func(t *testing.T, confDir string) (func(int), ClusterSources) {
				sock := filepath.Join(t.TempDir(), "cilium.sock")
				var status atomic.Value
				l, err := net.Listen("unix", sock)
				if err != nil {
					t.Fatal(err)
				}
				srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					s := status.Load().(string)
					if s == "" {
						http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
						return
					}
					fmt.Fprintf(w, `{"ipam":{"status":%q}}`, s)
				})}
				go srv.Serve(l)
				t.Cleanup(func() { srv.Close() })
				os.WriteFile(filepath.Join(confDir, "10-net.conflist"), []byte(`{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"cilium-cni"},{"type":"netready","status":{"ipam":{"type":"cilium","socket":"unix://`+sock+`"}}}]}`), 0o644)
				return func(a int) {
					status.Store(map[int]string{answerFull: "IPv4: 14/14 allocated from 10.200.95.0/28, ", answerRoom: "IPv4: 5/14 allocated from 10.200.95.0/28, "}[a])
				}, nil
			}},
		{name: "aws-vpc-cni while ipamd restarts", why: "503 Service Unavailable", room: pool.StateGrows,
			setup: func(t *testing.T, confDir string) (func(int), ClusterSources) {
				var enis, metricsFile atomic.Value
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					name := map[string]*atomic.Value{"/v1/enis": &enis, "/metrics": &metricsFile}[r.URL.Path]
					if name == nil || name.Load().(string) == "" {
						http.Error(w, "Service Unavailable", http.StatusServiceUnavailable)
						return
					}
					data, _ := os.ReadFile(filepath.Join("..", "testdata", "aws", name.Load().(string)))
					w.Write(data)
				}))
				t.Cleanup(srv.Close)
				os.WriteFile(filepath.Join(confDir, "10-net.conflist"), []byte(`{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"aws-cni"},{"type":"netready","status":{"ipam":{"type":"aws-vpc-cni","url":"`+srv.URL+`","metrics":"`+srv.URL+`/metrics"}}}]}`), 0o644)
				return func(a int) {
					switch a {
					case answerFull:
						enis.Store("enis-atmax.json")
						metricsFile.Store("metrics-atmax.txt")
					case answerRoom:
						enis.Store("enis-grows.json")
						metricsFile.Store("metrics-grows.txt")
					default:
						enis.Store("")
						metricsFile.Store("")
					}
				}, nil
			}},
		{name: "calico-ipam whose watches fail", why: "connection refused",
			setup: cluster("calico-ipam", `{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"calico","ipam":{"type":"calico-ipam"}},{"type":"netready","stateDir":%q,"status":{"ipam":"auto"}}]}`, false)},
		{name: "ovn-kubernetes syncing past the 5-minute hold", why: "its watches are listing",
			setup: cluster("ovn-kubernetes", `{"cniVersion":"1.1.0","name":"net","plugins":[{"type":"ovn-k8s-cni-overlay"},{"type":"netready","stateDir":%q,"status":{"ipam":"auto"}}]}`, true)},
	}
}

// TestCantTellHoldsTheTaint: for every source, a pool that can't tell
// leaves the taint as it was, for as long as it lasts (past the cluster
// sources' 5-minute sync hold too): exhausted and tainted stays tainted,
// room and untainted stays untainted. The condition keeps its status and
// says "held: can't tell since <when>: <cause>", and one Warning Event
// names the cause. A count that can tell again decides again.
func TestCantTellHoldsTheTaint(t *testing.T) {
	for _, src := range heldSources() {
		t.Run(src.name, func(t *testing.T) {
			client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
			confDir := t.TempDir()
			set, clusters := src.setup(t, confDir)
			rec := events.NewFakeRecorder(100)
			w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Hour, Clusters: clusters}, kubeapitest.Fake{C: client}, rec,
				slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
			clock := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
			w.now = func() time.Time { return clock }
			fsw, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer fsw.Close()
			// state reconciles (a round that is not full: what inotify
			// or the agent poll runs) and says what the Node shows.
			state := func(full bool) (bool, corev1.NodeCondition) {
				t.Helper()
				if err := w.reconcile(context.Background(), fsw, full); err != nil {
					t.Fatal(err)
				}
				n, err := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				c := nodewriter.Current(n)
				if c == nil {
					return nodewriter.Has(n), corev1.NodeCondition{}
				}
				return nodewriter.Has(n), *c
			}
			unknownEvents := func() []string {
				var got []string
				for {
					select {
					case e := <-rec.Events:
						if strings.Contains(e, nodewriter.ReasonPoolUnknown) {
							got = append(got, e)
						}
					default:
						return got
					}
				}
			}
			type shown struct {
				Tainted       bool
				Status        corev1.ConditionStatus
				State         string
				HeldExhausted bool
				Since         time.Time
			}
			show := func(full bool) shown {
				t.Helper()
				has, c := state(full)
				s := shown{Tainted: has, Status: c.Status}
				if pools := pool.ParseLine(c.Message); len(pools) == 1 {
					s.State, s.HeldExhausted, s.Since = pools[0].State, pools[0].HeldExhausted, pools[0].Since
					if pools[0].State == pool.StateUnknown && !strings.Contains(pools[0].Why, src.why) {
						t.Errorf("held pool's cause %q does not name %q", pools[0].Why, src.why)
					}
				} else {
					t.Errorf("condition message %q names %d pools, want 1", c.Message, len(pools))
				}
				return s
			}

			set(answerFull)
			if diff := cmp.Diff(shown{Tainted: true, Status: corev1.ConditionTrue, State: pool.StateExhausted}, show(false)); diff != "" {
				t.Fatalf("exhausted (-want +got):\n%s", diff)
			}
			set(answerCantTell)
			began := clock
			want := shown{Tainted: true, Status: corev1.ConditionTrue, State: pool.StateUnknown, HeldExhausted: true, Since: began}
			for _, step := range []time.Duration{0, 7 * time.Second, clusterSyncLimit, time.Hour} {
				clock = clock.Add(step)
				for _, full := range []bool{false, true} {
					if diff := cmp.Diff(want, show(full)); diff != "" {
						t.Errorf("can't tell %s after it began, tainted (full round %v) (-want +got):\n%s", clock.Sub(began), full, diff)
					}
				}
			}
			if got := unknownEvents(); len(got) != 1 || !strings.Contains(got[0], "Warning "+nodewriter.ReasonPoolUnknown) || !strings.Contains(got[0], src.why) {
				t.Errorf("Events while it can't tell = %q, want one Warning %s naming %q", got, nodewriter.ReasonPoolUnknown, src.why)
			}

			set(answerRoom)
			state(false) // hysteresis aside: 9 of 14 free lifts it at once
			room := src.room
			if room == "" {
				room = pool.StateRoom
			}
			if diff := cmp.Diff(shown{Status: corev1.ConditionFalse, State: room}, show(false)); diff != "" {
				t.Errorf("room again (-want +got):\n%s", diff)
			}
			set(answerCantTell)
			began = clock
			want = shown{Status: corev1.ConditionFalse, State: pool.StateUnknown, Since: began}
			for _, step := range []time.Duration{0, clusterSyncLimit + time.Minute} {
				clock = clock.Add(step)
				if diff := cmp.Diff(want, show(false)); diff != "" {
					t.Errorf("can't tell %s after it began, untainted (-want +got):\n%s", clock.Sub(began), diff)
				}
			}
			if got := unknownEvents(); len(got) != 1 {
				t.Errorf("Events of the second spell of can't tell = %q, want one", got)
			}
			set(answerFull)
			if diff := cmp.Diff(shown{Tainted: true, Status: corev1.ConditionTrue, State: pool.StateExhausted}, show(false)); diff != "" {
				t.Errorf("exhausted again (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCantTellFromTheStartHoldsTheNode: a sidecar that starts while a
// pool can't tell keeps the node as it found it: a tainted node stays
// tainted (a restart never lifts a taint on a guess), an untainted one
// stays untainted.
func TestCantTellFromTheStartHoldsTheNode(t *testing.T) {
	for _, tainted := range []bool{true, false} {
		t.Run(fmt.Sprint("tainted ", tainted), func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
			if tainted {
				n.Spec.Taints = []corev1.Taint{{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}}
			}
			client := fake.NewClientset(n)
			confDir := t.TempDir()
			src := heldSources()[1] // cilium
			set, _ := src.setup(t, confDir)
			set(answerCantTell)
			w := New(Config{ConfDir: confDir, Node: node, Resync: time.Hour, ForgetAfter: time.Hour}, kubeapitest.Fake{C: client}, nil,
				slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()), health.New())
			fsw, err := fsnotify.NewWatcher()
			if err != nil {
				t.Fatal(err)
			}
			defer fsw.Close()
			for range 3 {
				if err := w.reconcile(context.Background(), fsw, true); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
			if nodewriter.Has(got) != tainted {
				t.Errorf("tainted = %v after rounds that can't tell, want %v as the node was", nodewriter.Has(got), tainted)
			}
			if c := nodewriter.Current(got); c == nil || !strings.Contains(c.Message, "; held: can't tell since ") {
				t.Errorf("condition = %+v, want it to say held", c)
			}
		})
	}
}
