//go:build integration && demo

package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestNodeDemo is `make demo-node`: the node of TestNode, netready deployed
// from the release as the Quick start says, one gated pod whose network a slow agent programs 4 s
// after its veth appears, watched with the real `kubectl get pod -w`;
// then everything is torn down.
func TestNodeDemo(t *testing.T) {
	n := startNode(t)
	startHeartbeat(t, n.path("agent/heartbeat"))
	n.kubectl("apply", "-k", n.unpackRelease(), "--server-side")
	n.waitFor("netready installed", 2*time.Minute, func() bool { return n.entry() != nil && n.runtimeHasNetready() })
	t.Logf("netready is installed; creating pod web-0 with the readiness gate; the agent programs it 4 s after its veth appears")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch := exec.CommandContext(ctx, filepath.Join(n.bins, "kubectl"), "--kubeconfig", n.path("pki/admin.kubeconfig"),
		"--cache-dir", n.path("kubectl-cache"), "get", "pod", "web-0", "-w", "-o", "wide")
	watch.Stdout, watch.Stderr = os.Stdout, os.Stdout
	programmed := n.programLater("web-0", 4*time.Second)
	created := time.Now()
	n.createPod(nodePod("web-0", true))
	watch.Start()
	wrote := <-programmed
	p := n.waitPod("web-0", "Ready", time.Minute, podReady)
	time.Sleep(time.Second)
	cancel()
	watch.Wait()
	m := n.markerFor(p)
	t.Logf("agent programmed the pod %.1fs after create; Ready %.2fs after that; marker: state %s, waited %d ms",
		wrote.Sub(created).Seconds(), time.Since(wrote).Seconds()-1, m.State, m.WaitedMs)
	for _, c := range p.Status.Conditions {
		if c.Type == nodeConditionType {
			t.Logf("condition %s=%s reason %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
}
