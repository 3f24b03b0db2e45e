package conditions

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8stesting "k8s.io/client-go/testing"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/outcome"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
)

// TestRefusedPatchBacksOff: a patch the API server refuses for good (a
// policy's 403) is not retried at the work queue's pace but backs off to minutes,
// with one Warning Event per pod and the pods counted in a metric; a new
// condition for the pod is sent at once, and its success clears the count.
func TestRefusedPatchBacksOff(t *testing.T) {
	a, b := gatedPod("web-a", "u-a"), gatedPod("web-b", "u-b")
	h := newHarness(t, nil, a, b)
	var allow atomic.Bool
	h.client.PrependReactor("patch", "pods", func(act k8stesting.Action) (bool, runtime.Object, error) {
		if act.GetSubresource() != "status" || allow.Load() {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, act.(k8stesting.PatchAction).GetName(),
			errors.New("ValidatingAdmissionPolicy 'netready-sidecar-scope' denied request"))
	})
	now := time.Now()
	h.writeMarker(a, "podnet", "eth0", marker.StateReady, now)
	h.writeMarker(b, "podnet", "eth0", marker.StateReady, now)
	h.run()
	if n := h.settle(); n != 2 {
		t.Errorf("patches while refused = %d, want 2 (one per pod, then a backoff that grows to minutes)", n)
	}
	var refusals []string
	for _, e := range h.events() {
		if strings.Contains(e, publish.ReasonPublishRefused) {
			refusals = append(refusals, e)
		}
	}
	if len(refusals) != 2 || !strings.Contains(refusals[0], "Warning") || !strings.Contains(refusals[0], "netready-sidecar-scope") {
		t.Errorf("events = %q, want one Warning %s per pod naming the policy", refusals, publish.ReasonPublishRefused)
	}
	h.waitValue("netready_publish_refused_pods", func() float64 { return testutil.ToFloat64(h.c.metrics.RefusedPods) }, 2)
	h.waitValue("netready_publish_refused_total{reason=Forbidden}", func() float64 {
		return testutil.ToFloat64(h.c.metrics.Refused.WithLabelValues("Forbidden"))
	}, 2)

	// A new condition for web-a is another patch: sent at once, refused
	// again without a second Event.
	h.writeMarker(a, "podnet", "eth0", marker.StatePending, now)
	if n := h.settle(); n != 3 {
		t.Errorf("patches after web-a's marker changed = %d, want 3", n)
	}
	if evs := h.events(); len(evs) != 0 {
		t.Errorf("events after a second refusal = %q, want none", evs)
	}
	// Once allowed, the next condition goes through and web-a is no longer
	// counted; web-b stays refused.
	allow.Store(true)
	h.writeMarker(a, "podnet", "eth0", marker.StateReady, now)
	h.waitFor("web-a", "True once allowed", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	// The worker counts the success once the API server has answered,
	// which may be after the pod shows it.
	h.waitValue("netready_publish_refused_pods after web-a went through", func() float64 { return testutil.ToFloat64(h.c.metrics.RefusedPods) }, 1)
	if c := h.condition("web-b"); c != nil {
		t.Errorf("web-b was patched during its backoff: %+v", c)
	}
}

func TestPatchErrorKinds(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	uidInvalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{
		field.Invalid(field.NewPath("metadata", "uid"), "u-2", "field is immutable")})
	tests := []struct {
		name               string
		err                error
		forGood, uidChange bool
	}{
		{"a policy's 403", apierrors.NewForbidden(gr, "web", errors.New("denied")), true, false},
		{"422", apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "web", field.ErrorList{field.Invalid(field.NewPath("status", "conditions"), "x", "bad")}), true, false},
		{"400", apierrors.NewBadRequest("bad patch"), true, false},
		{"422 on metadata.uid", uidInvalid, true, true},
		{"409", apierrors.NewConflict(gr, "web", errors.New("uid")), false, false},
		{"429", apierrors.NewTooManyRequests("slow down", 1), false, false},
		{"500", apierrors.NewInternalError(errors.New("etcd")), false, false},
		{"504", apierrors.NewServerTimeout(gr, "patch", 1), false, false},
		{"no answer", fmt.Errorf("patch: %w", syscall.ECONNREFUSED), false, false},
	}
	for _, tt := range tests {
		if got := refusedForGood(tt.err); got != tt.forGood {
			t.Errorf("%s: refusedForGood = %v, want %v", tt.name, got, tt.forGood)
		}
		if got := uidMismatch(tt.err); got != tt.uidChange {
			t.Errorf("%s: uidMismatch = %v, want %v", tt.name, got, tt.uidChange)
		}
	}
}

// TestProgressMessagesAreDebounced: a pending check whose reason changes on
// every probe (an ephemeral port) does not repatch the pod every round;
// the marker turning ready is published at once.
func TestProgressMessagesAreDebounced(t *testing.T) {
	pod := gatedPod("web-0", "u-0")
	h := newHarness(t, nil, pod)
	stop := make(chan struct{})
	var rounds atomic.Int32
	h.c.recheck = func(ctx context.Context, _ pending.Inputs, m *marker.Marker, _ pending.Schedule, progress func(*marker.Marker)) (*marker.Marker, error) {
		for i := 0; ; i++ {
			p := *m
			p.Checks = []marker.CheckResult{{Kind: "http", Target: "http://10.200.0.1:9099/ready", Why: fmt.Sprintf("connection refused (from 10.200.0.5:%d)", 40000+i)}}
			progress(&p)
			rounds.Add(1)
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-stop:
				<-ctx.Done()
				return nil, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	h.writeMarker(pod, "podnet", "eth0", marker.StatePending, time.Now())
	h.run()
	h.waitFor("web-0", "False, pending", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	time.Sleep(time.Second)
	close(stop)
	if n, r := h.settle(), rounds.Load(); n > 2 || r < 20 {
		t.Errorf("patches over %d progress rounds = %d, want at most 2:\n%s", r, n, strings.Join(h.patchBodies(), "\n"))
	}
	h.writeMarker(pod, "podnet", "eth0", marker.StateReady, time.Now())
	h.waitFor("web-0", "True once ready", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
}

// TestRefusalBackoffSchedule: a refused pod is tried again soon once (an
// API server that just started answers 403 until its RBAC cache is
// filled), then at minutes.
func TestRefusalBackoffSchedule(t *testing.T) {
	pod := gatedPod("web-a", "u-a")
	h := newHarness(t, nil, pod)
	want := corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue, Reason: publish.ReasonProgrammed}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "web-a", errors.New("RBAC: not yet"))
	var got []time.Duration
	for range 7 {
		got = append(got, h.c.refuse(pod, want, forbidden))
	}
	wantSchedule := []time.Duration{5 * time.Second, 20 * time.Second, 80 * time.Second, 320 * time.Second, 10 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	if diff := cmp.Diff(wantSchedule, got); diff != "" {
		t.Errorf("backoff (-want +got):\n%s", diff)
	}
}

// TestAddWaitCountsEveryOutcomeOnce: netready_add_wait_seconds counts each
// ADD once, as the ADD left it: ready and pending markers of gated and
// ungated pods, and fail-mode timeouts from the outcome journal; not a
// re-check that makes a pending marker ready, and not what was there
// before the sidecar started.
func TestAddWaitCountsEveryOutcomeOnce(t *testing.T) {
	gated, plain, late := gatedPod("web-a", "u-a"), gatedPod("web-b", "u-b"), gatedPod("web-c", "u-c")
	plain.Spec.ReadinessGates = nil
	h := newHarness(t, nil, gated, plain, late)
	dir := filepath.Join(h.c.opts.StateDir, "podnet")
	// Before start: an ADD and a journal record, counted by an earlier
	// sidecar.
	h.writeMarker(late, "podnet", "eth0", marker.StateReady, time.Now().Add(-time.Hour))
	if err := outcome.Append(dir, outcome.Record{ContainerID: "old", IfName: "eth0", Outcome: outcome.TimeoutFail, WaitedMs: 10_000}); err != nil {
		t.Fatal(err)
	}
	h.run()
	// What comes after the first scan is new.
	for deadline := time.Now().Add(10 * time.Second); !h.c.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the controller never became ready")
		}
	}
	count := func(o string) uint64 {
		var m dto.Metric
		h.c.metrics.AddWait.WithLabelValues("podnet", o).(prometheus.Histogram).Write(&m)
		return m.GetHistogram().GetSampleCount()
	}
	now := time.Now()
	h.writeMarker(gated, "podnet", "eth0", marker.StatePending, now)
	h.writeMarker(plain, "podnet", "eth0", marker.StateReady, now)
	for i := range 2 {
		outcome.Append(dir, outcome.Record{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0", Outcome: outcome.TimeoutFail, WaitedMs: 10_000})
	}
	want := map[string]uint64{outcome.Ready: 1, outcome.TimeoutProceed: 1, outcome.TimeoutFail: 2}
	waitFor := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			got := map[string]uint64{}
			for o := range want {
				got[o] = count(o)
			}
			if cmp.Equal(want, got) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: counts (-want +got):\n%s", what, cmp.Diff(want, got))
			}
		}
	}
	waitFor("one of each ADD")
	// The re-check's rewrite keeps the ADD's start: not another ADD.
	h.writeMarker(gated, "podnet", "eth0", marker.StateReady, now)
	time.Sleep(300 * time.Millisecond)
	waitFor("after a re-check made the pending marker ready")
	// A new ADD of the same attachment is counted.
	h.writeMarker(plain, "podnet", "eth0", marker.StateReady, now.Add(time.Second))
	want[outcome.Ready] = 2
	waitFor("a second ADD of the same attachment")
}
