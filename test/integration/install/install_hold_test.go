//go:build integration

package install

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/notes"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// setSandboxUpSince writes what kubelet posts about a pod whose sandbox has
// been up since at, with ip.
func setSandboxUpSince(t *testing.T, a *kube.APIServer, name string, at time.Time, ip string) {
	t.Helper()
	for range 20 {
		pod, err := a.Admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodReadyToStartContainers,
			Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)})
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if _, err = a.Admin.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}
	t.Fatal("pod status kept conflicting")
}

// TestAnInstallBackoffHoldsOnlyNewPodsAndNotForever: the real sidecar,
// against a real kube-apiserver, reads the installer's note of a backoff
// (as netready-install writes it). Pods that were True before it stay
// True: one that netready never saw, up for two days, and one with a ready
// marker. A gated pod whose sandbox comes up after the note, with no
// marker, is held not ready naming the backoff, and released once
// --not-in-effect-hold-max has passed, with a Warning Event that names
// the backoff.
func TestAnInstallBackoffHoldsOnlyNewPodsAndNotForever(t *testing.T) {
	a := kube.StartAPIServer(t)
	state := t.TempDir()
	const holdMax = 4 * time.Second
	listen, _ := kube.StartSidecar(t, a, state, kube.SidecarNode, "--unobserved-grace", "1s", "--unobserved", "ready",
		"--not-in-effect-hold-max", holdMax.String())

	a.NewPod("old-unseen", kube.SidecarNode)
	setSandboxUpSince(t, a, "old-unseen", time.Now().Add(-48*time.Hour), "10.200.9.10")
	programmed := a.NewPod("old-programmed", kube.SidecarNode)
	if err := (marker.Store{Dir: state}).Write(cnitest.ReadyMarker("cilium", "0123456789abcdef", programmed, "10.200.9.11/24")); err != nil {
		t.Fatal(err)
	}
	setSandboxUpSince(t, a, "old-programmed", time.Now().Add(-48*time.Hour), "10.200.9.11")
	isTrue := func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue }
	kube.WaitCondition(t, a, "old-unseen", 10*time.Second, "True, not observed, before the note", isTrue)
	kube.WaitCondition(t, a, "old-programmed", 10*time.Second, "True, programmed, before the note", isTrue)

	const msg = "another agent removed netready from /etc/cni/net.d/05-cilium.conflist 5 times within 5m0s: netready-install stops putting it back for 1m0s"
	if err := notes.NoteInstallBackoff(state, "cilium", msg); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, "the sidecar reads the note", func() (bool, string) {
		m := kube.MetricsText(t, listen)
		return kube.SumSeries(m, "netready_install_backed_off", `network="cilium"`) == 1, harness.GrepLines(m, "netready_install_backed_off")
	})
	// Whole seconds on the pod's side: the sandbox comes up in a later
	// second than the note, as it does on a node.
	time.Sleep(time.Second)
	a.NewPod("fresh", kube.SidecarNode)
	kube.SetSandboxStatus(t, a, "fresh", corev1.ConditionTrue, "10.200.9.12")
	heldAt := time.Now()
	c := kube.WaitCondition(t, a, "fresh", 10*time.Second, "held not ready, naming the backoff", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse
	})
	if c.Reason != publish.ReasonNotObserved || !strings.Contains(c.Message, "stops putting it back") {
		t.Errorf("held condition = %+v, want NotObserved naming the backoff", c)
	}
	// The hold is in force, and takes back no True.
	kube.Stays(t, a, "old-unseen", 2*time.Second, "True for a pod up before the note", isTrue)
	kube.Stays(t, a, "old-programmed", time.Second, "True for a pod with a ready marker", isTrue)

	c = kube.WaitCondition(t, a, "fresh", holdMax+15*time.Second, "released after the bound", isTrue)
	if c.Reason != publish.ReasonNotObserved || time.Since(heldAt) < holdMax-2*time.Second {
		t.Errorf("released condition = %+v after %s, want NotObserved True no sooner than about %s", c, time.Since(heldAt), holdMax)
	}
	var released bool
	for start := time.Now(); time.Since(start) < 10*time.Second && !released; time.Sleep(200 * time.Millisecond) {
		list, err := a.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			released = released || (e.Regarding.Name == "fresh" && e.Type == corev1.EventTypeWarning && e.Reason == publish.ReasonNotObserved &&
				strings.Contains(e.Note, "--not-in-effect-hold-max") && strings.Contains(e.Note, "stops putting it back"))
		}
	}
	if !released {
		t.Error("no Warning Event on the released pod naming the backoff and --not-in-effect-hold-max")
	}
	kube.Stays(t, a, "old-unseen", time.Second, "True for a pod up before the note, to the end", isTrue)
}

// TestAnInstallBackoffHoldsAtMostTwoMinutesByDefault: where the installer
// backs off from an agent that keeps removing netready (Cilium's default
// cni.exclusive), netready is not in effect, and the real sidecar, with
// its default flags, releases a pod it held within the documented bound
// (--not-in-effect-hold-max, 1m by default, never more than 2m), as
// --unobserved says (ready: True, NotObserved), with a Warning Event
// naming the backoff.
func TestAnInstallBackoffHoldsAtMostTwoMinutesByDefault(t *testing.T) {
	a := kube.StartAPIServer(t)
	state := t.TempDir()
	listen, _ := kube.StartSidecar(t, a, state, kube.SidecarNode, "--unobserved-grace", "1s")
	const msg = "another agent removed netready from /etc/cni/net.d/05-cilium.conflist 5 times within 5m0s: netready-install stops putting it back for 1m0s"
	if err := notes.NoteInstallBackoff(state, "cilium", msg); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, "the sidecar reads the note", func() (bool, string) {
		m := kube.MetricsText(t, listen)
		return kube.SumSeries(m, "netready_install_backed_off", `network="cilium"`) == 1, harness.GrepLines(m, "netready_install_backed_off")
	})
	time.Sleep(time.Second) // the sandbox comes up in a later second than the note
	pod := a.NewPod("fresh", kube.SidecarNode)
	kube.SetSandboxStatus(t, a, "fresh", corev1.ConditionTrue, "10.200.9.13")
	up := time.Now()
	kube.WaitCondition(t, a, "fresh", 10*time.Second, "held not ready, naming the backoff", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotObserved && strings.Contains(c.Message, "stops putting it back")
	})
	const bound = 2 * time.Minute
	c := kube.WaitCondition(t, a, "fresh", bound+5*time.Second-time.Since(up), "released within the documented bound",
		func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	t.Logf("released %s after the sandbox came up: %s", time.Since(up).Round(time.Second), c.Message)
	if c.Reason != publish.ReasonNotObserved || time.Since(up) < 50*time.Second {
		t.Errorf("released condition = %+v after %s, want NotObserved True after the default 1m", c, time.Since(up))
	}
	var events []string
	for start := time.Now(); time.Since(start) < 10*time.Second && !slices.ContainsFunc(events, func(e string) bool {
		return strings.HasPrefix(e, "Warning NotObserved: held not ready for 1m0s (--not-in-effect-hold-max)") && strings.Contains(e, "stops putting it back")
	}); time.Sleep(200 * time.Millisecond) {
		events = kube.EventsFor(t, a, pod)
	}
	if !slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, "held not ready for 1m0s") }) {
		t.Errorf("Events on the released pod: %q; want a Warning NotObserved naming the backoff and the bound", events)
	}
}
