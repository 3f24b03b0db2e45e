//go:build integration

package sidecar

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/test/harness"
)

// TestCalicoPresetNotWriting: with the calico preset on a node whose Felix
// writes no endpoint status (endpointStatusPathPrefix unset, the default),
// the real plugin's pending marker, the real sidecar against a real API
// server, and the real kubectl-netready all name the missing folder and
// the FelixConfiguration field: in the pod's condition, in a Warning Event
// on the Node with netready_preset_not_writing 1, and in `kubectl netready
// explain`.
func TestCalicoPresetNotWriting(t *testing.T) {
	a := harness.StartAPIServer(t)
	felix := filepath.Join(t.TempDir(), "calico", "endpoint-status") // never created
	n := harness.NewNet(t, "calico-style.conflist", func(n *harness.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "1s"
		n.Netready()["onTimeout"] = "proceed"
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "file", "preset": "calico", "path": felix}}
	})
	listen, _ := harness.StartSidecar(t, a, n.StateDir, harness.SidecarNode)
	if _, err := a.Admin.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: harness.SidecarNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := a.NewPod("felix-0", harness.SidecarNode)
	netns := harness.NewNS(t)
	if _, err := n.Add(netns.Path(), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=felix-0;K8S_POD_UID="+string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	want := "calico preset: " + felix + " does not exist; set endpointStatusPathPrefix in FelixConfiguration"
	c := harness.WaitCondition(t, a, "felix-0", 15*time.Second, "False naming the missing folder", func(c *corev1.PodCondition) bool {
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
	if got := harness.SumSeries(harness.MetricsText(t, listen), "netready_preset_not_writing", `network="`+n.Name+`"`); got != 1 {
		t.Errorf("netready_preset_not_writing = %d, want 1", got)
	}

	kc := a.Kubeconfig("admin", harness.AdminToken)
	out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), "--kubeconfig", kc, "explain", "felix-0").CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), "endpointStatusPathPrefix") {
		t.Errorf("kubectl netready explain felix-0: exit %d, want 1 naming endpointStatusPathPrefix:\n%s", code, out)
	}
	if !strings.Contains(string(out), "warning:     NetreadyPresetNotWriting") {
		t.Errorf("kubectl netready explain felix-0 does not repeat the node's warning:\n%s", out)
	}
	out, err = exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), "--kubeconfig", kc, "status").CombinedOutput()
	// Exit 1: a warning is a problem status names.
	if exitCode(err) != 1 || !strings.Contains(string(out), harness.SidecarNode+": NetreadyPresetNotWriting") || !strings.Contains(string(out), want) {
		t.Errorf("kubectl netready status: %v, want exit 1 and a line for %s naming %q:\n%s", err, harness.SidecarNode, want, out)
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
