package conditions

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
)

// TestOneConditionForTwoMarkers: a pod with two attachments settles after
// one patch per real change, False while one is pending, True once both
// are ready, and its message names each network.
func TestOneConditionForTwoMarkers(t *testing.T) {
	pod := gatedPod("web-0", "u-0")
	// Both markers are there before the first scan: written one after
	// the other to a running sidecar, the first alone is a change too.
	h := newHarness(t, nil, pod)
	now := time.Now()
	h.writeMarker(pod, "podnet", "eth0", marker.StateReady, now)
	h.writeMarker(pod, "storagenet", "net1", marker.StatePending, now)
	h.run()

	c := h.waitFor("web-0", "False while net1 is pending", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	for _, want := range []string{"network podnet (eth0) programmed", "network storagenet (net1): waiting for: nftables set inet/agent/pods4 has 10.200.0.5"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q lacks %q", c.Message, want)
		}
	}
	if n := h.settle(); n != 1 {
		t.Errorf("patches after one change = %d, want 1", n)
	}
	h.writeMarker(pod, "storagenet", "net1", marker.StateReady, now)
	c = h.waitFor("web-0", "True once both are ready", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if c.Reason != publish.ReasonProgrammed || !strings.Contains(c.Message, "podnet") || !strings.Contains(c.Message, "storagenet") {
		t.Errorf("ready condition = %+v, want NetworkProgrammed naming both networks", c)
	}
	if n := h.settle(); n != 2 {
		t.Errorf("patches after two changes = %d, want 2", n)
	}
	// A rewrite with the same content is no change.
	h.writeMarker(pod, "storagenet", "net1", marker.StateReady, now)
	if n := h.settle(); n != 2 {
		t.Errorf("patches after an identical rewrite = %d, want 2", n)
	}
	evs := strings.Join(h.events(), "\n")
	if !strings.Contains(evs, "Warning NetworkNotProgrammed") || strings.Count(evs, "Normal NetworkProgrammed") != 1 {
		t.Errorf("events:\n%s\nwant one Warning NetworkNotProgrammed and one Normal NetworkProgrammed", evs)
	}
}

// TestScope: only gated pods are patched; hostNetwork pods are True at
// once; markers of a recreated pod's predecessor are never published.
func TestScope(t *testing.T) {
	ungated := gatedPod("plain", "u-plain")
	ungated.Spec.ReadinessGates = nil
	host := gatedPod("host", "u-host")
	host.Spec.HostNetwork = true
	recreated := gatedPod("again", "u-new")
	h := start(t, nil, ungated, host, recreated)
	h.writeMarker(ungated, "podnet", "eth0", marker.StateReady, time.Now())
	h.writeMarker(gatedPod("again", "u-old"), "podnet", "eth0", marker.StateReady, time.Now())

	c := h.waitFor("host", "True for hostNetwork", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if c.Reason != publish.ReasonHostNetwork {
		t.Errorf("hostNetwork condition = %+v, want reason HostNetwork", c)
	}
	h.settle()
	if c := h.condition("plain"); c != nil {
		t.Errorf("ungated pod got %+v", c)
	}
	if c := h.condition("again"); c != nil {
		t.Errorf("recreated pod got %+v from its predecessor's marker", c)
	}
	if got := testutil.ToFloat64(h.c.metrics.GatedPods); got != 2 {
		t.Errorf("netready_gated_pods = %v, want 2 (host, again; plain has no gate)", got)
	}
	if err := h.client.CoreV1().Pods("default").Delete(context.Background(), "host", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(h.c.metrics.GatedPods) != 1 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	if got := testutil.ToFloat64(h.c.metrics.GatedPods); got != 1 {
		t.Errorf("netready_gated_pods once a gated pod is deleted = %v, want 1", got)
	}
}

// TestNotObserved: a gated pod whose sandbox is up with no marker turns
// True (or stays False with --unobserved=notready) after the grace, with a
// Warning Event; a pod whose sandbox is not up is left alone.
func TestNotObserved(t *testing.T) {
	for _, mode := range []string{UnobservedReady, UnobservedNotReady} {
		t.Run(mode, func(t *testing.T) {
			up := gatedPod("up", "u-up")
			up.Status.PodIP = "10.200.0.9"
			up.Status.StartTime = &metav1.Time{Time: time.Now()}
			starting := gatedPod("starting", "u-starting")
			const grace = 2 * time.Second
			h := start(t, func(o *Config) { o.UnobservedGrace = grace; o.Unobserved = mode }, up, starting)
			time.Sleep(200 * time.Millisecond)
			// The grace runs from the sandbox's start: on a loaded machine
			// the controller's own start can take most of it.
			if c := h.condition("up"); c != nil && time.Since(up.Status.StartTime.Time) < grace {
				t.Fatalf("condition before the grace ended: %+v", c)
			}
			want := corev1.ConditionTrue
			if mode == UnobservedNotReady {
				want = corev1.ConditionFalse
			}
			c := h.waitFor("up", "set after the grace", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotObserved })
			if c.Status != want {
				t.Errorf("status = %s, want %s", c.Status, want)
			}
			if evs := strings.Join(h.eventsWith("Warning NotObserved"), "\n"); !strings.Contains(evs, "Warning NotObserved") {
				t.Errorf("events %q lack a Warning NotObserved", evs)
			}
			if c := h.condition("starting"); c != nil {
				t.Errorf("pod without a sandbox got %+v", c)
			}
		})
	}
}

// TestPendingNeverGivenUp: past --pending-timeout the condition says how
// long it has waited, a Warning Event says so once, and the re-check keeps
// running with a backoff capped at one minute.
func TestPendingNeverGivenUp(t *testing.T) {
	pod := gatedPod("slow", "u-slow")
	h := start(t, func(o *Config) { o.PendingTimeout = time.Minute }, pod)
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, time.Now().Add(-5*time.Minute))
	c := h.waitFor("slow", "False, late", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	if !strings.Contains(c.Message, "still not programmed more than 1m0s after ADD") {
		t.Errorf("message %q does not say how long it has waited", c.Message)
	}
	h.settle()
	h.mu.Lock()
	scheds := h.schedules
	h.mu.Unlock()
	if len(scheds) != 1 || scheds[0].Patience != time.Minute || scheds[0].MaxGap != time.Minute {
		t.Errorf("re-checks started = %+v, want one with patience 1m and a 1m cap", scheds)
	}
	if got := testutil.ToFloat64(h.c.metrics.Pending); got != 1 {
		t.Errorf("netready_pending_attachments = %v, want 1 while the re-check runs", got)
	}
	if got := testutil.ToFloat64(h.c.metrics.PendingOldest); got < float64(time.Now().Add(-time.Hour).Unix()) || got > float64(time.Now().Unix()) {
		t.Errorf("netready_pending_oldest_start_timestamp_seconds = %v, want the ADD's start", got)
	}
	evs := h.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning NetworkNotProgrammed") {
		t.Errorf("events = %q, want one Warning NetworkNotProgrammed", evs)
	}
}

func TestSandboxUp(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	prtsc := func(s corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: corev1.PodReadyToStartContainers, Status: s, LastTransitionTime: metav1.NewTime(t0)}
	}
	tests := []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"nothing yet", corev1.Pod{}, false},
		{"an IP, no condition (older kubelet)", corev1.Pod{Status: corev1.PodStatus{PodIP: "10.200.0.5"}}, true},
		{"condition True", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{prtsc(corev1.ConditionTrue)}}}, true},
		{"sandbox being recreated: condition False, old IP", corev1.Pod{Status: corev1.PodStatus{PodIP: "10.200.0.5",
			Conditions: []corev1.PodCondition{prtsc(corev1.ConditionFalse)}}}, false},
		{"terminating", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: t0}},
			Status: corev1.PodStatus{PodIP: "10.200.0.5", Conditions: []corev1.PodCondition{prtsc(corev1.ConditionTrue)}}}, false},
	}
	for _, tt := range tests {
		if _, got := sandboxUp(&tt.pod); got != tt.want {
			t.Errorf("%s: sandboxUp = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestFailedRecheckIsNotRestarted: a re-check ends only for good (the pod's
// netns is gone, a check that can never be met, the marker removed or
// rewritten); a write that fails for a while (ENOSPC, EMFILE) is retried
// inside it (pending.TestRecheckRetriesAFailedWrite). One that ended is
// not started again for the same marker, however often the pod is
// processed; a rewritten marker starts a new one.
func TestFailedRecheckIsNotRestarted(t *testing.T) {
	pod := gatedPod("gone", "u-gone")
	h := start(t, nil, pod)
	var calls atomic.Int32
	h.c.recheck = func(context.Context, pending.Inputs, *marker.Marker, pending.Schedule, func(*marker.Marker)) (*marker.Marker, error) {
		calls.Add(1)
		return nil, errors.New("check address 10.200.0.5: can never succeed: pod netns is gone")
	}
	created := time.Now()
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, created)
	h.waitFor("gone", "False", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	for i := 0; i < 20; i++ {
		h.c.queue.Add("default/gone")
	}
	h.settle()
	if n := calls.Load(); n != 1 {
		t.Errorf("re-checks started = %d, want 1: a failed re-check must not restart in a loop", n)
	}
	if got := testutil.ToFloat64(h.c.metrics.Pending); got != 0 {
		t.Errorf("netready_pending_attachments = %v, want 0 once the re-check ended", got)
	}
	if got := testutil.ToFloat64(h.c.metrics.PendingOldest); got != 0 {
		t.Errorf("netready_pending_oldest_start_timestamp_seconds = %v, want 0 once nothing is pending", got)
	}
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, created.Add(time.Second))
	for deadline := time.Now().Add(5 * time.Second); calls.Load() < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("re-checks after a new ADD's marker = %d, want 2", n)
	}
}

// TestRestartRepeatsNothing: a sidecar that starts (or restarts) over a pod
// that already shows what its marker says neither patches it nor records
// another Event.
func TestRestartRepeatsNothing(t *testing.T) {
	pod := gatedPod("steady", "u-steady")
	pod.Status.Conditions = []corev1.PodCondition{{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, Message: "sandbox c-u-steady; network podnet (eth0) programmed after 7 ms", LastTransitionTime: metav1.Now()}}
	h := newHarness(t, nil, pod)
	h.writeMarker(pod, "podnet", "eth0", marker.StateReady, time.Now())
	h.run()
	if n := h.settle(); n != 0 {
		t.Errorf("patches after a restart over an up-to-date pod = %d, want 0", n)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("events after a restart = %q, want none", evs)
	}
}

// TestUnreadableMarkerKeepsPodNotReady: a marker that exists but cannot be
// read (an unknown version, EMFILE) keeps its pod not ready, even when the
// pod's other marker is ready; the reason names the file and the error.
// It is read again without any inotify event, and the pod turns True once
// it reads as ready.
func TestUnreadableMarkerKeepsPodNotReady(t *testing.T) {
	pod := gatedPod("two", "u-two")
	h := newHarness(t, nil, pod)
	h.c.retryEvery = 100 * time.Millisecond
	var failing atomic.Bool
	h.c.read = func(path string) (*marker.Marker, error) {
		if failing.Load() && strings.HasSuffix(path, "_net1.json") {
			return nil, fmt.Errorf("read marker: %w", syscall.EMFILE)
		}
		return marker.ReadFile(path)
	}
	now := time.Now()
	h.writeMarker(pod, "podnet", "eth0", marker.StateReady, now)
	h.writeMarker(pod, "storagenet", "net1", marker.StatePending, now)
	h.run()
	h.waitFor("two", "False while net1 is pending", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotProgrammed })

	net1, _ := h.store.Path(marker.Key{Network: "storagenet", ContainerID: "c-u-two", IfName: "net1"})
	if err := os.WriteFile(net1, []byte(`{"version": 99}`), 0o644); err != nil {
		t.Fatal(err)
	}
	c := h.waitFor("two", "MarkerUnreadable", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonMarkerUnreadable && strings.Contains(c.Message, "version 99")
	})
	if c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, net1) {
		t.Errorf("condition = %+v, want False naming %s and its error", c, net1)
	}

	failing.Store(true)
	h.writeMarker(pod, "storagenet", "net1", marker.StateReady, now)
	c = h.waitFor("two", "EMFILE named", func(c *corev1.PodCondition) bool { return strings.Contains(c.Message, "too many open files") })
	if c.Status != corev1.ConditionFalse {
		t.Errorf("condition while the marker cannot be opened = %+v, want False", c)
	}
	failing.Store(false) // no event follows: only the retry reads it again
	h.waitFor("two", "True once it reads as ready", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if evs := strings.Join(h.eventsWith("Warning MarkerUnreadable"), "\n"); !strings.Contains(evs, "Warning MarkerUnreadable") {
		t.Errorf("events %q lack a Warning MarkerUnreadable", evs)
	}
}

// TestStrayUnreadableMarker: a marker that could never be read names no
// pod, and may be any new pod's. While it stays, a gated pod with no
// marker is not judged NotObserved (True) but kept False naming it; a pod
// already judged keeps its condition. Once it is gone, NotObserved
// follows.
func TestStrayUnreadableMarker(t *testing.T) {
	fresh := gatedPod("fresh", "u-fresh")
	fresh.Status.PodIP = "10.200.0.9"
	fresh.Status.StartTime = &metav1.Time{Time: time.Now()}
	judged := gatedPod("judged", "u-judged")
	judged.Status.PodIP = "10.200.0.10"
	judged.Status.StartTime = &metav1.Time{Time: time.Now().Add(-time.Hour)}
	judged.Status.Conditions = []corev1.PodCondition{publish.WithTransition(
		publish.NotObserved(publish.DefaultConditionType, true, 200*time.Millisecond), nil, time.Now())}
	h := newHarness(t, func(o *Config) { o.UnobservedGrace = 200 * time.Millisecond }, fresh, judged)
	h.c.retryEvery = 100 * time.Millisecond
	stray := filepath.Join(h.store.Dir, "podnet", "c-new_eth0.json")
	os.MkdirAll(filepath.Dir(stray), 0o755)
	if err := os.WriteFile(stray, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.run()
	c := h.waitFor("fresh", "False naming the stray marker", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonMarkerUnreadable })
	if c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, stray) {
		t.Errorf("condition = %+v, want False naming %s", c, stray)
	}
	h.settle()
	if c := h.condition("judged"); c.Reason != publish.ReasonNotObserved || c.Status != corev1.ConditionTrue {
		t.Errorf("a pod judged before the stray marker came = %+v, want it left NotObserved True", c)
	}
	os.Remove(stray)
	c = h.waitFor("fresh", "NotObserved once the stray marker is gone", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotObserved })
	if c.Status != corev1.ConditionTrue {
		t.Errorf("condition = %+v, want NotObserved True", c)
	}
}

// TestScanForgetsVanishedMarkers: a marker removed while its inotify
// event was lost (an overflow) is forgotten by the next scan, which is
// what runs after an overflow. The controller is not running, so no event
// reaches it: only scan can see the removal.
func TestScanForgetsVanishedMarkers(t *testing.T) {
	pod := gatedPod("gone", "u-gone")
	h := newHarness(t, nil, pod)
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, time.Now())
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	h.c.scan(w)
	path, _ := h.store.Path(marker.Key{Network: "podnet", ContainerID: "c-u-gone", IfName: "eth0"})
	if diff := cmp.Diff([]string{path}, h.c.state.known()); diff != "" {
		t.Fatalf("indexed after the first scan (-want +got):\n%s", diff)
	}
	os.Remove(path)
	h.c.scan(w)
	if known := h.c.state.known(); len(known) != 0 {
		t.Errorf("after a scan that no longer finds it, the index still holds %v", known)
	}
}
