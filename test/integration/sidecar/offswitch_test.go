//go:build integration

package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/atomicfile"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/statedir"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestTheOffSwitchReleasesGatedPodsAndIsUndone: against a real API server,
// with deploy/'s RBAC and markers the real plugin wrote, a stale off note
// is removed at start; the ConfigMap netready-off turns a pod whose check
// can never be met True (NetreadyOff) within 30 s, with a Warning Event,
// and notes it for the plugin; deleting it removes the note, a new pod is
// judged as usual and the released one stays True.
func TestTheOffSwitchReleasesGatedPodsAndIsUndone(t *testing.T) {
	a := kube.StartAPIServer(t)
	n := cnitest.NewNet(t, "bridge.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "1s"
		n.Netready()["onTimeout"] = "proceed"
		n.Netready()["checks"] = []any{map[string]any{"kind": "file", "path": "/nonexistent/netready-never"}}
	})
	note := filepath.Join(n.StateDir, statedir.Off)
	if err := os.WriteFile(note, []byte("left by a sidecar that died\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// And the temp of a note whose write was killed before its rename, as
	// atomicfile names it, two minutes old.
	killed := filepath.Join(n.StateDir, atomicfile.TempPrefix+statedir.Off+".4242")
	if err := os.WriteFile(killed, []byte("netready is swi"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(killed, time.Now().Add(-2*time.Minute), time.Now().Add(-2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	kube.StartSidecar(t, a, n.StateDir, kube.SidecarNode)
	harness.Within(t, "the stale off note removed at start", 30*time.Second, func() bool { return !offswitch.Noted(n.StateDir) })
	if _, err := os.Lstat(killed); err == nil {
		t.Errorf("the temp of a killed note write, %s, is still there after the sidecar's start", filepath.Base(killed))
	}

	add := func(pod *corev1.Pod) {
		t.Helper()
		netns := cnitest.NewNS(t)
		if _, err := n.Add(netns.Path(), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME="+pod.Name+";K8S_POD_UID="+string(pod.UID)); err != nil {
			t.Fatal(err)
		}
		m := n.ReadMarker(cnitest.ContainerID(netns.Path()), "eth0")
		if m.State != marker.StatePending {
			t.Fatalf("marker of %s is %s, want pending", pod.Name, m.State)
		}
		kube.SetSandboxStatus(t, a, pod.Name, corev1.ConditionTrue, strings.Split(m.IPs[0], "/")[0])
	}
	released := a.NewPod("off-0", kube.SidecarNode)
	add(released)
	kube.WaitCondition(t, a, released.Name, 15*time.Second, "False while its check is unmet", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotProgrammed
	})

	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offswitch.ConfigMapName, Namespace: "kube-system"}}
	if _, err := a.Admin.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	kube.WaitCondition(t, a, released.Name, 30*time.Second, "released by the off switch", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonOff
	})
	t.Logf("released %s after the ConfigMap was created", time.Since(start).Round(time.Millisecond))
	harness.Within(t, "the off note for the plugin", 30*time.Second, func() bool { return offswitch.Noted(n.StateDir) })
	if evs := kube.EventsFor(t, a, released); !strings.Contains(strings.Join(evs, "\n"), "Warning "+publish.ReasonOff+": ") {
		t.Errorf("no Warning %s Event for the released pod; events: %q", publish.ReasonOff, evs)
	}

	if err := a.Admin.CoreV1().ConfigMaps("kube-system").Delete(ctx, offswitch.ConfigMapName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Within(t, "the off note removed once on again", 30*time.Second, func() bool { return !offswitch.Noted(n.StateDir) })
	fresh := a.NewPod("off-1", kube.SidecarNode)
	add(fresh)
	kube.WaitCondition(t, a, fresh.Name, 15*time.Second, "a new pod judged as usual", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotProgrammed
	})
	kube.Stays(t, a, released.Name, 5*time.Second, "the True given while off stays", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonOff
	})
}
