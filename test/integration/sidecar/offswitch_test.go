//go:build integration

package sidecar

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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
// and the temp of a killed note write are removed at start; the real
// kubectl-netready off (the ConfigMap netready-off) turns a pod whose
// check can never be met True (NetreadyOff) within 30 s, with a Warning
// Event, and notes it for the plugin; status's first line and explain
// say netready is off, and explain that the pod's True came from the
// switch, not its network. kubectl-netready on removes the note, a new
// pod is judged as usual, the released one stays True and explain says
// why.
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

	kc := a.Kubeconfig("admin", kube.AdminToken)
	netready := func(args ...string) (string, int) {
		t.Helper()
		out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
		t.Logf("kubectl-netready %s (exit %d):\n%s", strings.Join(args, " "), exitCode(err), out)
		return string(out), exitCode(err)
	}
	if out, code := netready("off"); code != 0 || !strings.Contains(out, "ConfigMap kube-system/"+offswitch.ConfigMapName+" created") {
		t.Fatalf("kubectl-netready off: exit %d, want 0 and the ConfigMap created", code)
	}
	start := time.Now()
	kube.WaitCondition(t, a, released.Name, 30*time.Second, "released by the off switch", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonOff
	})
	t.Logf("released %s after the ConfigMap was created", time.Since(start).Round(time.Millisecond))
	harness.Within(t, "the off note for the plugin", 30*time.Second, func() bool { return offswitch.Noted(n.StateDir) })
	// The sidecar sends Events from a queue of their own, after the
	// patch: give it a few seconds.
	var evs []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		evs = kube.EventsFor(t, a, released)
		if strings.Contains(strings.Join(evs, "\n"), "Warning "+publish.ReasonOff+": ") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(strings.Join(evs, "\n"), "Warning "+publish.ReasonOff+": ") {
		t.Errorf("no Warning %s Event for the released pod within 10 s; events: %q", publish.ReasonOff, evs)
	}
	const offLine = "netready is OFF since "
	const by = "by kubectl-netready (ConfigMap kube-system/" + offswitch.ConfigMapName + "): "
	const releasedBy = "pod default/off-0 on node " + kube.SidecarNode + " was released by netready's off switch, not by its network (True, reason NetreadyOff)"
	if out, code := netready("status"); code == 2 || !strings.HasPrefix(out, offLine) || !strings.Contains(strings.SplitN(out, "\n", 2)[0], by) {
		t.Errorf("kubectl-netready status while off: exit %d, its first line does not say netready is off, by kubectl-netready", code)
	}
	if out, code := netready("explain", "-n", "default", released.Name); code != 0 || !strings.HasPrefix(out, releasedBy) || !strings.Contains(out, "\n  off:         "+offLine) {
		t.Errorf("kubectl-netready explain of the released pod: exit %d, want 0, the off switch named as what gave its True, and the off line", code)
	}

	if out, code := netready("on"); code != 0 || !strings.Contains(out, "ConfigMap kube-system/"+offswitch.ConfigMapName+" deleted") {
		t.Fatalf("kubectl-netready on: exit %d, want 0 and the ConfigMap deleted", code)
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
	if out, code := netready("explain", "-n", "default", released.Name); code != 0 || !strings.HasPrefix(out, releasedBy+": its network was not checked; netready is on again") || strings.Contains(out, offLine) {
		t.Errorf("kubectl-netready explain of the released pod once on: exit %d, want 0 and that the True given while off stays", code)
	}
	if out, _ := netready("status"); strings.Contains(out, offLine) {
		t.Error("kubectl-netready status once on still says netready is off")
	}
}
