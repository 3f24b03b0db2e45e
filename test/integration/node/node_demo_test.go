//go:build integration && demo

package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/netready/netready/test/harness/kube"
)

// TestNodeDemo is `make demo-node`: the node of TestQuickStartWorksOnARealNode, netready deployed
// from the release as the Quick start says, one gated pod whose network a slow agent programs 4 s
// after its veth appears, watched with the real `kubectl get pod -w`;
// then everything is torn down.
func TestNodeDemo(t *testing.T) {
	n := kube.StartNode(t)
	kube.StartHeartbeat(t, n.Path("agent/heartbeat"))
	n.Kubectl("apply", "-k", n.UnpackRelease(), "--server-side")
	n.WaitFor("netready installed", 2*time.Minute, func() bool { return n.Entry() != nil && n.RuntimeHasNetready() })
	t.Logf("netready is installed; creating pod web-0 with the readiness gate; the agent programs it 4 s after its veth appears")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, filepath.Join(n.Bins, "kubectl"), "--kubeconfig", n.Path("pki/admin.kubeconfig"),
		"--cache-dir", n.Path("kubectl-cache"), "get", "pod", "web-0", "-w", "-o", "wide")
	watch.Stdout, watch.Stderr = os.Stdout, os.Stdout
	programmed := n.ProgramLater("web-0", 4*time.Second)
	created := time.Now()
	n.CreatePod(kube.NodePod("web-0", true))
	watch.Start()
	wrote := <-programmed
	p := n.WaitPod("web-0", "Ready", time.Minute, kube.PodReady)
	time.Sleep(time.Second)
	cancel()
	watch.Wait()
	m := n.MarkerFor(p)
	t.Logf("agent programmed the pod %.1fs after create; Ready %.2fs after that; marker: state %s, waited %d ms",
		wrote.Sub(created).Seconds(), time.Since(wrote).Seconds()-1, m.State, m.WaitedMs)
	for _, c := range p.Status.Conditions {
		if c.Type == kube.NodeConditionType {
			t.Logf("condition %s=%s reason %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}
