package conditions

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/metrics"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
)

const node = "node-a"

type harness struct {
	t        *testing.T
	c        *Controller
	client   *fake.Clientset
	recorder *events.FakeRecorder
	store    marker.Store
	// schedules records what each re-check was given.
	mu        sync.Mutex
	schedules []pending.Schedule
}

// start runs a controller over a fake clientset holding pods; edit may
// change its options first.
func start(t *testing.T, edit func(*Config), pods ...*corev1.Pod) *harness {
	t.Helper()
	h := newHarness(t, edit, pods...)
	h.run()
	return h
}

// newHarness is start without running the controller, for markers that
// must be there before its first scan.
func newHarness(t *testing.T, edit func(*Config), pods ...*corev1.Pod) *harness {
	t.Helper()
	o := Config{StateDir: t.TempDir(), NodeName: node, ConditionType: publish.DefaultConditionType,
		PendingTimeout: time.Hour, Resync: time.Hour, Workers: 2, UnobservedGrace: 30 * time.Second, Unobserved: UnobservedReady}
	if edit != nil {
		edit(&o)
	}
	h := &harness{t: t, store: marker.Store{Dir: o.StateDir}, recorder: events.NewFakeRecorder(100)}
	h.client = fake.NewClientset()
	for _, p := range pods {
		if _, err := h.client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	h.client.ClearActions()
	h.c = New(o, kubeapitest.Fake{C: h.client}, h.recorder, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New(prometheus.NewRegistry()))
	// Re-checks block until stopped: the test writes markers itself.
	h.c.recheck = func(ctx context.Context, _ pending.Inputs, _ *marker.Marker, s pending.Schedule, _ func(*marker.Marker)) (*marker.Marker, error) {
		h.mu.Lock()
		h.schedules = append(h.schedules, s)
		h.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h
}

func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.c.Run(ctx) }()
	h.t.Cleanup(func() { cancel(); <-done })
}

func gatedPod(name, uid string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(uid)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "i"}},
			ReadinessGates: []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}},
	}
}

func (h *harness) writeMarker(pod *corev1.Pod, network, ifName, state string, created time.Time) {
	h.t.Helper()
	m := &marker.Marker{
		Version: marker.Version, Network: network, ContainerID: "c-" + string(pod.UID), IfName: ifName,
		Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
		IPs: []string{"10.200.0.5/24"}, State: state, CreatedAt: marker.Time{Time: created}, WaitedMs: 7,
	}
	if state == marker.StatePending {
		m.Checks = []marker.CheckResult{{Kind: "nftables", Target: "set inet/agent/pods4 has 10.200.0.5", Why: "IP not in the set yet"}}
		m.Pending = &marker.Pending{}
	} else {
		m.ReadyAt = &marker.Time{Time: created.Add(7 * time.Millisecond)}
	}
	if err := h.store.Write(m); err != nil {
		h.t.Fatal(err)
	}
}

// patchBodies lists the pods/status patches sent so far, for a failure
// message.
func (h *harness) patchBodies() []string {
	var out []string
	for _, a := range h.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetSubresource() == "status" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

// patches counts pods/status patches sent so far.
func (h *harness) patches() int {
	n := 0
	for _, a := range h.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && p.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func (h *harness) condition(name string) *corev1.PodCondition {
	pod, err := h.client.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return publish.Current(pod, publish.DefaultConditionType)
}

func (h *harness) waitFor(name, what string, ok func(*corev1.PodCondition) bool) *corev1.PodCondition {
	h.t.Helper()
	var c *corev1.PodCondition
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c = h.condition(name); c != nil && ok(c) {
			return c
		}
	}
	h.t.Fatalf("pod %s: %s: not within 10s; last condition %+v", name, what, c)
	return nil
}

// waitValue waits, for at most 10 s, until get returns want: a figure the
// controller updates after what the test can see (the patched pod).
func (h *harness) waitValue(what string, get func() float64, want float64) {
	h.t.Helper()
	got := get()
	for deadline := time.Now().Add(10 * time.Second); got != want && time.Now().Before(deadline); got = get() {
		time.Sleep(10 * time.Millisecond)
	}
	if got != want {
		h.t.Errorf("%s = %v, want %v (waited 10s)", what, got, want)
	}
}

// settle waits until no patch has been sent for a while, and returns the
// count.
func (h *harness) settle() int {
	n := h.patches()
	for quiet := 0; quiet < 10; quiet++ {
		time.Sleep(100 * time.Millisecond)
		if m := h.patches(); m != n {
			n, quiet = m, 0
		}
	}
	return n
}

// events returns the Events recorded so far, after a moment for those
// that follow a patch.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		case <-time.After(300 * time.Millisecond):
			return out
		}
	}
}

// eventsWith returns the Events recorded so far once one contains want
// (waiting up to 10 s: a worker records a pod's Event after its patch,
// which the test may see first), after a moment for more.
func (h *harness) eventsWith(want string) []string {
	var out []string
	for deadline := time.After(10 * time.Second); ; {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
			if strings.Contains(e, want) {
				return append(out, h.events()...)
			}
		case <-deadline:
			return out
		}
	}
}
