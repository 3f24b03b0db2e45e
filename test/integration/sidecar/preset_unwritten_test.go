//go:build integration

package sidecar

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestCalicoPresetNotWriting: with the calico preset on a node whose Felix
// writes no endpoint status (endpointStatusPathPrefix unset, the default),
// the real plugin's pending marker, the real sidecar against a real API
// server, and the real kubectl-netready all name the missing folder and
// the FelixConfiguration field: in the pod's condition, in a Warning Event
// on the Node with netready_preset_not_writing 1, and in `kubectl netready
// explain`.
func TestCalicoPresetNotWriting(t *testing.T) {
	a := kube.StartAPIServer(t)
	felix := filepath.Join(t.TempDir(), "calico", "endpoint-status") // never created
	n := cnitest.NewNet(t, "calico-style.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "1s"
		n.Netready()["onTimeout"] = "proceed"
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "file", "preset": "calico", "path": felix}}
	})
	listen, _ := kube.StartSidecar(t, a, n.StateDir, kube.SidecarNode)
	if _, err := a.Admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kube.SidecarNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := a.NewPod("felix-0", kube.SidecarNode)
	netns := cnitest.NewNS(t)
	if _, err := n.Add(netns.Path(), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=felix-0;K8S_POD_UID="+string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	want := "calico preset: " + felix + " does not exist; set endpointStatusPathPrefix in FelixConfiguration"
	c := kube.WaitCondition(t, a, "felix-0", 15*time.Second, "False naming the missing folder", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want)
	})
	t.Logf("condition: %s", c.Message)

	var events []string
	for start := time.Now(); time.Since(start) < 10*time.Second && len(events) == 0; time.Sleep(200 * time.Millisecond) {
		list, err := a.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Reason == "NetreadyPresetNotWriting" {
				events = append(events, e.Note)
			}
		}
	}
	if len(events) != 1 || !strings.Contains(events[0], want) {
		t.Errorf("Node Events NetreadyPresetNotWriting = %q, want one naming %q", events, want)
	}
	if got := kube.SumSeries(kube.MetricsText(t, listen), "netready_preset_not_writing", `network="`+n.Name+`"`); got != 1 {
		t.Errorf("netready_preset_not_writing = %d, want 1", got)
	}

	kc := a.Kubeconfig("admin", kube.AdminToken)
	out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), "--kubeconfig", kc, "explain", "felix-0").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "endpointStatusPathPrefix") {
		t.Errorf("kubectl netready explain felix-0: exit %d, want 1 naming endpointStatusPathPrefix:\n%s", code, out)
	}
	if !strings.Contains(string(out), "warning:     NetreadyPresetNotWriting") {
		t.Errorf("kubectl netready explain felix-0 does not repeat the node's warning:\n%s", out)
	}
	out, err = exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), "--kubeconfig", kc, "status").CombinedOutput()
	// Exit 1: a warning is a problem status names.
	if exitCode(err) != 1 || !strings.Contains(string(out), kube.SidecarNode+": NetreadyPresetNotWriting") || !strings.Contains(string(out), want) {
		t.Errorf("kubectl netready status: %v, want exit 1 and a line for %s naming %q:\n%s", err, kube.SidecarNode, want, out)
	}
}

// exitCode is a finished command's exit code (0 without an error).
func exitCode(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestPresetThatNeverWroteIsNotInEffect: with the calico preset on a node
// whose Felix never wrote endpoint status, the real plugin's pending
// marker does not gate its pod for ever: the real sidecar, against a real
// API server, judges it as a pod netready did not see (--unobserved=ready:
// True, NotObserved) --not-in-effect-hold-max after its ADD began, with a
// Warning Event on the pod naming the cause, and keeps it so once Felix
// writes. A node where Felix has written once is not this case: after
// Felix's folder goes away and the sidecar restarts, with the pod that
// proved it gone, a new pod's pending marker is never given up on.
func TestPresetThatNeverWroteIsNotInEffect(t *testing.T) {
	a := kube.StartAPIServer(t)
	felix := filepath.Join(t.TempDir(), "calico", "endpoint-status") // not there yet
	n := cnitest.NewNet(t, "calico-style.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "1s"
		n.Netready()["onTimeout"] = "proceed"
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "file", "preset": "calico", "path": felix}}
	})
	const hold = 10 * time.Second
	flags := []string{"--not-in-effect-hold-max", hold.String(), "--unobserved", "ready"}
	_, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, n.StateDir, kube.SidecarNode, flags...)
	if _, err := a.Admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kube.SidecarNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	add := func(name string) (*corev1.Pod, func()) {
		t.Helper()
		pod := a.NewPod(name, kube.SidecarNode)
		netns := cnitest.NewNS(t)
		args := "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name + ";K8S_POD_UID=" + string(pod.UID)
		if _, err := n.Add(netns.Path(), args); err != nil {
			t.Fatal(err)
		}
		return pod, func() {
			if _, err := n.Cnitool("del", netns.Path(), args); err != nil {
				t.Fatal(err)
			}
		}
	}
	notWriting := checks.CalicoNotWriting(felix)

	began := time.Now()
	silent, _ := add("silent-0")
	kube.WaitCondition(t, a, "silent-0", 15*time.Second, "False naming the missing folder", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotProgrammed && strings.Contains(c.Message, notWriting)
	})
	c := kube.WaitCondition(t, a, "silent-0", hold+20*time.Second, "judged as not observed", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonNotObserved
	})
	if took := time.Since(began); c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "netready is not in effect on this node") ||
		!strings.Contains(c.Message, notWriting) || took < hold-2*time.Second {
		t.Errorf("condition after %s: %+v; want True, NotObserved, naming the cause, no sooner than about %s", took, c, hold)
	}
	var released, all []string
	for start := time.Now(); time.Since(start) < 10*time.Second && len(released) == 0; time.Sleep(200 * time.Millisecond) {
		released, all = nil, kube.EventsFor(t, a, silent)
		for _, e := range all {
			if strings.HasPrefix(e, "Warning NotObserved: ") && strings.Contains(e, "not in effect") && strings.Contains(e, "endpointStatusPathPrefix") {
				released = append(released, e)
			}
		}
	}
	if len(released) != 1 {
		t.Errorf("Events on %s: %q; want one Warning NotObserved naming the cause", silent.Name, all)
	}

	// Felix is set up now: a pod's ADD waits on its file, which Felix
	// writes; the pod judged before keeps its condition.
	if err := os.MkdirAll(felix, 0o755); err != nil {
		t.Fatal(err)
	}
	_, del := add("proof-0")
	kube.WaitCondition(t, a, "proof-0", 15*time.Second, "False, waiting for the file", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonNotProgrammed && strings.Contains(c.Message, "file does not exist (yet)")
	})
	if err := os.WriteFile(filepath.Join(felix, checks.CalicoStatusFileName("default", "proof-0", "eth0")), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	kube.WaitCondition(t, a, "proof-0", 30*time.Second, "True once Felix wrote", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonProgrammed
	})
	kube.Stays(t, a, "silent-0", time.Second, "the pod judged before keeps its condition", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonNotObserved
	})

	// Felix's folder goes (a restart of it), the pod that proved it is
	// deleted (DEL), and the sidecar restarts: Felix has written here, so a
	// new pod waiting on it is never given up on.
	stop()
	del()
	if err := os.RemoveAll(felix); err != nil {
		t.Fatal(err)
	}
	kube.StartSidecarProc(t, a.AgentKubeconfig, n.StateDir, kube.SidecarNode, flags...)
	began = time.Now()
	add("after-0")
	kube.WaitCondition(t, a, "after-0", 15*time.Second, "False naming the missing folder", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotProgrammed && strings.Contains(c.Message, notWriting)
	})
	kube.Stays(t, a, "after-0", hold+10*time.Second-time.Since(began), "pending on a node where Felix wrote", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && c.Reason == publish.ReasonNotProgrammed
	})
}
