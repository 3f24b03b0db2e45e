package propagation

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/netready/netready/pkg/kubeapi"
	"github.com/netready/netready/pkg/metrics"
)

// fakeSource is the API server: node-b's labels, a list that answers
// resourceVersion 10 (or forbidden), and watches whose events the test
// sends.
type fakeSource struct {
	labels    map[string]string
	forbidden bool

	mu      sync.Mutex
	asked   []string
	watches chan *watch.FakeWatcher
}

func (f *fakeSource) note(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, s)
}

func (f *fakeSource) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func (f *fakeSource) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	f.note("get node " + name)
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: f.labels}}, nil
}

func (f *fakeSource) ListCiliumEndpoints(_ context.Context, opts metav1.ListOptions) (*kubeapi.CiliumEndpointList, error) {
	f.note(fmt.Sprintf("list limit=%d", opts.Limit))
	if f.forbidden {
		return nil, apierrors.NewForbidden(schema.GroupResource{Group: "cilium.io", Resource: "ciliumendpoints"}, "", nil)
	}
	return &kubeapi.CiliumEndpointList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}, nil
}

func (f *fakeSource) WatchCiliumEndpoints(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	f.note("watch from " + opts.ResourceVersion)
	w := watch.NewFake()
	f.watches <- w
	return w, nil
}

// syncLog is a log the test reads while the meter writes it.
type syncLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncLog) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunMeasuresOnlyOnSelectedNodesFromNow: the meter reads its Node's
// labels; where they match it lists one CiliumEndpoint for "now" and
// watches from there, measuring what comes; where they do not, or the
// API server refuses the list (RBAC), it says so once, names the fix,
// asks again later, and never fails.
func TestRunMeasuresOnlyOnSelectedNodesFromNow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		labels    map[string]string
		selector  string
		forbidden bool
		want      []string
		log       string
		observed  int
		apiErrors int
	}{
		{name: "selected", labels: map[string]string{"netready.io/measure": "true"}, selector: "netready.io/measure=true",
			want: []string{"get node node-b", "list limit=1", "watch from 10"}, log: "measuring Cilium propagation", observed: 1},
		{name: "another value", labels: map[string]string{"netready.io/measure": "false"}, selector: "netready.io/measure=true",
			want: []string{"get node node-b", "get node node-b"}, log: "not measuring Cilium propagation"},
		{name: "no labels", selector: "netready.io/measure", want: []string{"get node node-b", "get node node-b"}, log: "not measuring Cilium propagation"},
		{name: "forbidden", labels: map[string]string{"m": "1"}, selector: "m=1", forbidden: true,
			want: []string{"get node node-b", "list limit=1", "get node node-b", "list limit=1"},
			log:  "give the sidecar's ClusterRole list and watch on ciliumendpoints.cilium.io", apiErrors: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := labels.Parse(tc.selector)
			if err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			cfg.Node, cfg.Selector, cfg.Recheck = "node-b", sel, 100*time.Millisecond
			src := &fakeSource{labels: tc.labels, forbidden: tc.forbidden, watches: make(chan *watch.FakeWatcher, 4)}
			m := metrics.New(prometheus.NewRegistry())
			var logs syncLog
			meter := New(cfg, src, startAgent(t, map[string]mapping{"10.1.0.1": {identity: 300}}), m, slog.New(slog.NewTextHandler(&logs, nil)))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); meter.Run(ctx) }()
			if tc.observed > 0 {
				w := <-src.watches
				w.Add(event{watch.Added, "a", otherIP, 300, []string{"10.1.0.1"}}.watchEvent().Object)
				for start := time.Now(); outcomeOf(t, m).Observed < tc.observed && time.Since(start) < 5*time.Second; {
					time.Sleep(10 * time.Millisecond)
				}
			} else {
				time.Sleep(150 * time.Millisecond) // one recheck
			}
			cancel()
			<-done
			got := src.requests()
			if len(got) > len(tc.want) {
				got = got[:len(tc.want)]
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("API requests (-want +got):\n%s", diff)
			}
			if n := strings.Count(logs.String(), tc.log); n != 1 {
				t.Errorf("log has %q %d times, want once:\n%s", tc.log, n, logs.String())
			}
			if got := outcomeOf(t, m).Observed; got != tc.observed {
				t.Errorf("observed %d, want %d", got, tc.observed)
			}
			if got := int(testutil.ToFloat64(m.APIErrors.WithLabelValues("Forbidden"))); got < tc.apiErrors || (tc.apiErrors == 0 && got > 0) {
				t.Errorf("netready_api_errors_total{reason=Forbidden} %d, want at least %d", got, tc.apiErrors)
			}
		})
	}
}

// TestSayOfAWatchThatEndedSilently: RetryWatcher may close its channel
// with no ERROR event, so the session ends with no error; the meter says
// so rather than fail.
func TestSayOfAWatchThatEndedSilently(t *testing.T) {
	var buf bytes.Buffer
	m := &Meter{log: slog.New(slog.NewTextHandler(&buf, nil))}
	m.say(nil, time.Second)
	if !strings.Contains(buf.String(), errWatchEnded.Error()) {
		t.Errorf("logged %q, want it to say %q", buf.String(), errWatchEnded)
	}
}
