//go:build integration

package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// TestSandboxGoneTakesItsTrue: on a real node (kubelet, containerd), the
// sidecar learns a pod's sandbox went from its DEL, which comes before
// kubelet's status says so.
//   - A running pod whose sandbox is stopped (crictl stopp): its True goes
//     to False (SandboxChanged) at once, never to a not-observed True, and
//     the new sandbox's ADD earns it back.
//   - A gated pod with restartPolicy Never that finishes: kubelet makes it
//     no other sandbox, and its phase, within --unobserved-grace of the
//     DEL, is its end: no False, no Warning Event.
//
// The sidecar's --unobserved-grace is 5 s: the stopped sandbox has been up
// longer than it, as a long-running pod's has, and kubelet has that long to
// finish a Job pod after its DEL.
func TestSandboxGoneTakesItsTrue(t *testing.T) {
	n := startClientNode(t)
	kube.StartSidecarProc(t, n.Path("pki/admin.kubeconfig"), n.Path("state"), kube.NodeName,
		"--condition-type", kube.NodeConditionType, "--cni-conf-dir", "", "--unobserved-grace", "5s")
	writeFirstPacketConflist(n, fmt.Sprintf(`{"type": "netready", "timeout": "10s", "stateDir": %q, "checks": [{"kind": "address"}]}`, n.Path("state")))
	ctx := context.Background()

	t.Run("a running pod's sandbox stopped", func(t *testing.T) {
		n.T = t
		n.CreatePod(kube.NodePod("web", true))
		n.WaitPod("web", "Ready", time.Minute, kube.PodReady)
		sandbox := strings.TrimSpace(crictl(t, n, "pods", "--name", "web", "--state", "ready", "-q"))
		if len(sandbox) < 12 || strings.Contains(sandbox, "\n") {
			t.Fatalf("crictl pods: want the one ready sandbox of web, got %q", sandbox)
		}
		time.Sleep(6 * time.Second) // past --unobserved-grace since the sandbox came up
		conds := watchCondition(t, n, "web")
		crictl(t, n, "stopp", sandbox)
		p := n.WaitPod("web", "True from a new sandbox", 2*time.Minute, func(p *corev1.Pod) bool {
			c := publish.Current(p, kube.NodeConditionType)
			return c != nil && c.Status == corev1.ConditionTrue && c.Reason == publish.ReasonProgrammed && !strings.Contains(c.Message, sandbox[:12])
		})
		seen := conds()
		var reasons []string
		for _, c := range seen {
			reasons = append(reasons, fmt.Sprintf("%s/%s", c.Status, c.Reason))
		}
		if len(seen) == 0 || seen[0].Status != corev1.ConditionFalse || seen[0].Reason != publish.ReasonSandboxChanged {
			t.Errorf("conditions after the sandbox stopped: %v; want SandboxChanged False first", reasons)
		}
		for _, c := range seen {
			if c.Reason == publish.ReasonNotObserved {
				t.Errorf("the pod was judged not observed (%s) while kubelet had yet to report its sandbox gone: %v", c.Message, reasons)
			}
		}
		t.Logf("after crictl stopp: %v; now %q", reasons, publish.Current(p, kube.NodeConditionType).Message)
	})

	t.Run("a restartPolicy Never pod that finishes", func(t *testing.T) {
		n.T = t
		const pods = 5
		for i := range pods {
			n.CreatePod(clientPod(fmt.Sprintf("job-%d", i), 9, true, false))
		}
		n.WaitFor("every job pod finished", 2*time.Minute, func() bool {
			list, err := n.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			done := 0
			for _, p := range list.Items {
				if strings.HasPrefix(p.Name, "job-") && (p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed) {
					done++
				}
			}
			return err == nil && done == pods
		})
		// Past the sidecar's wait for the phase: a write would be out.
		time.Sleep(7 * time.Second)
		evs, err := n.Admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.InvolvedObject.Name, "job-") && e.Reason == publish.ReasonSandboxChanged {
				t.Errorf("%s: Warning %s %q for a pod that finished", e.InvolvedObject.Name, e.Reason, e.Message)
			}
		}
		for i := range pods {
			if c := publish.Current(n.Pod(fmt.Sprintf("job-%d", i)), kube.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue {
				t.Errorf("job-%d's condition %+v, want the True its sandbox earned, kept", i, c)
			}
		}
	})
	n.T = t
	clearPods(n, ctx)
}

// crictl runs crictl against the node's containerd.
func crictl(t *testing.T, n *kube.K8sNode, args ...string) string {
	t.Helper()
	out, err := n.CRI.Crictl(args...)
	if err != nil {
		t.Fatalf("crictl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// watchCondition records each change of the pod's netready condition from
// now on; the returned func gives them so far. The watch starts at the
// pod as read now, so no event of before is taken for a change.
func watchCondition(t *testing.T, n *kube.K8sNode, name string) func() []corev1.PodCondition {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	now, err := n.Admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := n.Admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: now.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []corev1.PodCondition
	last := publish.Current(now, kube.NodeConditionType)
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			c := publish.Current(p, kube.NodeConditionType)
			mu.Lock()
			if c != nil && (last == nil || c.Status != last.Status || c.Reason != last.Reason || c.Message != last.Message) {
				seen = append(seen, *c)
				last = c
			}
			mu.Unlock()
		}
	}()
	return func() []corev1.PodCondition {
		mu.Lock()
		defer mu.Unlock()
		return append([]corev1.PodCondition(nil), seen...)
	}
}
