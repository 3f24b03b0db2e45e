package conditions

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/pending"
	"github.com/netready/netready/pkg/publish"
)

const felixWhy = "calico preset: /var/run/calico/endpoint-status does not exist; set endpointStatusPathPrefix in FelixConfiguration (to /var/run/calico)"

// writeSilent writes pod's pending marker on k8s-pod-network whose check
// says Felix is not set up to write (checks.CalicoNotWriting).
func (h *harness) writeSilent(pod *corev1.Pod, created time.Time) *marker.Marker {
	h.t.Helper()
	m := &marker.Marker{
		Version: marker.Version, Network: "k8s-pod-network", ContainerID: "c-" + string(pod.UID), IfName: "eth0",
		Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
		IPs: []string{"10.200.0.5/24"}, State: marker.StatePending, CreatedAt: marker.Time{Time: created}, WaitedMs: 1000,
		Checks:  []marker.CheckResult{{Kind: "file", Target: "/var/run/calico/endpoint-status/k8s default%2F" + pod.Name + " eth0", Why: felixWhy}},
		Pending: &marker.Pending{},
	}
	if err := h.store.Write(m); err != nil {
		h.t.Fatal(err)
	}
	return m
}

// runStoppable runs the controller until the returned stop is called.
func (h *harness) runStoppable() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.c.Run(ctx) }()
	stop = func() { cancel(); <-done }
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) waitReady() {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !h.c.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatal("the controller never became ready")
		}
	}
}

// TestPresetThatNeverWroteIsGivenUpOn: on a node where a preset's agent
// never wrote, a pod whose ADD left a pending marker saying so is judged
// as one netready did not see once --not-in-effect-hold-max has passed
// since its ADD began, with a Warning Event naming the cause; the Node's
// Event says so too. Only fresh checks count: a marker from before the
// sidecar started waits for the sidecar's own re-check.
func TestPresetThatNeverWroteIsGivenUpOn(t *testing.T) {
	fresh, old := gatedPod("web-a", "u-a"), gatedPod("web-b", "u-b")
	h := newHarness(t, func(o *Config) { o.NotInEffectHoldMax = 300 * time.Millisecond }, fresh, old)
	h.writeSilent(old, time.Now().Add(-time.Hour))
	probe := make(chan struct{})
	h.c.recheck = func(ctx context.Context, _ pending.Inputs, m *marker.Marker, _ pending.Schedule, progress func(*marker.Marker)) (*marker.Marker, error) {
		if m.Pod.Name == old.Name {
			select {
			case <-probe:
				progress(m) // the sidecar's own probe says the same
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	h.run()
	h.waitReady()
	start := time.Now()
	h.writeSilent(fresh, start)
	c := h.waitFor("web-a", "judged as not observed", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotObserved })
	if c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "netready is not in effect on this node for network k8s-pod-network") ||
		!strings.Contains(c.Message, "endpointStatusPathPrefix") || time.Since(start) < 300*time.Millisecond {
		t.Errorf("condition %+v after %s; want True, NotObserved, naming the cause, after the bound", c, time.Since(start))
	}
	evs := strings.Join(h.eventsWith("Warning NotObserved"), "\n")
	if !strings.Contains(evs, "Warning NotObserved sandbox c-u-a; netready is not in effect") || !strings.Contains(evs, "Warning "+nodewriter.ReasonPresetNotWriting) ||
		!strings.Contains(evs, "--not-in-effect-hold-max") {
		t.Errorf("events:\n%s\nwant a Warning NotObserved on the pod naming the cause, and the Node's %s naming the bound", evs, nodewriter.ReasonPresetNotWriting)
	}

	// The marker read back at start tells of the past: not given up on
	// until the sidecar's own re-check says the same.
	if c := h.condition("web-b"); c == nil || c.Status != corev1.ConditionFalse || c.Reason != publish.ReasonNotProgrammed {
		t.Errorf("web-b, whose marker is from before the start: %+v, want False, NetworkNotProgrammed", c)
	}
	close(probe)
	h.waitFor("web-b", "judged as not observed once re-checked", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotObserved })
}

// TestPresetThatWorkedIsNeverGivenUpOn: once a marker of the network was
// ready on this node, its preset's agent works here: a later pending
// marker saying the agent is not set up (its folder gone for a restart) is
// never given up on, also by a sidecar restarted after the ready pod went.
func TestPresetThatWorkedIsNeverGivenUpOn(t *testing.T) {
	was, now := gatedPod("web-0", "u-0"), gatedPod("web-1", "u-1")
	hold := func(o *Config) { o.NotInEffectHoldMax = 200 * time.Millisecond }
	h := newHarness(t, hold, was, now)
	stop := h.runStoppable()
	h.waitReady()
	ready := h.writeSilent(was, time.Now())
	ready.State, ready.Checks, ready.Pending, ready.ReadyAt = marker.StateReady, nil, nil, &marker.Time{Time: time.Now()}
	if err := h.store.Write(ready); err != nil {
		t.Fatal(err)
	}
	h.waitFor("web-0", "True, programmed", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonProgrammed })
	// A worker may publish from the file before the main loop handles its
	// event, which records it.
	worked := filepath.Join(h.c.opts.StateDir, "k8s-pod-network", WorkedFile)
	h.waitValue("a record that the network worked", func() float64 {
		if _, err := os.Stat(worked); err != nil {
			return 0
		}
		return 1
	}, 1)
	stop()
	// The ready pod goes (DEL), and a sidecar starts again.
	if err := h.store.Remove(marker.Key{Network: ready.Network, ContainerID: ready.ContainerID, IfName: ready.IfName}); err != nil {
		t.Fatal(err)
	}
	h2 := newHarness(t, func(o *Config) { hold(o); o.StateDir = h.c.opts.StateDir }, now)
	h2.run()
	h2.waitReady()
	h2.writeSilent(now, time.Now())
	h2.waitFor("web-1", "False, pending", func(c *corev1.PodCondition) bool { return c.Reason == publish.ReasonNotProgrammed })
	time.Sleep(time.Second)
	if c := h2.condition("web-1"); c.Reason != publish.ReasonNotProgrammed {
		t.Errorf("web-1 on a network that worked here: %+v, want still NetworkNotProgrammed", c)
	}
}
