//go:build integration

package sidecar

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestTrueNeverOutlivesItsSandbox: against a real kube-apiserver, with
// markers that the real plugin writes and removes through cnitool (ADD,
// DEL), and pod status written as kubelet writes it, a pod's True is taken
// back when the sandbox that earned it goes: False with reason
// SandboxChanged once DEL removed its marker and the sandbox is down; True
// again from the new sandbox's marker, naming it. A sidecar that was down
// across a recreate whose new sandbox has no marker yet (kubelet already
// reports it up, with another IP) starts by publishing False, never
// keeping the old True.
func TestTrueNeverOutlivesItsSandbox(t *testing.T) {
	a := kube.StartAPIServer(t)
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	_, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, n.StateDir, kube.SidecarNode, "--unobserved-grace", "5m")
	pod := a.NewPod("web-s", kube.SidecarNode)
	args := "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-s;K8S_POD_UID=" + string(pod.UID)
	sandbox := func() (string, string) {
		netns := cnitest.NewNS(t)
		if _, err := n.Add(netns.Path(), args); err != nil {
			t.Fatal(err)
		}
		m := n.ReadMarker(cnitest.ContainerID(netns.Path()), "eth0")
		return netns.Path(), strings.Split(m.IPs[0], "/")[0]
	}

	ns1, ip1 := sandbox()
	kube.SetSandboxStatus(t, a, "web-s", corev1.ConditionTrue, ip1)
	id1 := publish.ShortID(cnitest.ContainerID(ns1))
	c := kube.WaitCondition(t, a, "web-s", 10*time.Second, "True from the first sandbox", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if !strings.HasPrefix(c.Message, "sandbox "+id1+";") {
		t.Errorf("True condition %q does not name its sandbox %s", c.Message, id1)
	}

	// The sandbox dies: the runtime's DEL, and kubelet's status.
	if _, err := n.Cnitool("del", ns1, args); err != nil {
		t.Fatal(err)
	}
	kube.SetSandboxStatus(t, a, "web-s", corev1.ConditionFalse, ip1)
	c = kube.WaitCondition(t, a, "web-s", 10*time.Second, "False once the sandbox that earned True is gone", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	if c.Reason != publish.ReasonSandboxChanged || !strings.Contains(c.Message, "sandbox "+id1+" is gone") {
		t.Errorf("condition after the sandbox went = %+v, want SandboxChanged naming %s", c, id1)
	}

	ns2, ip2 := sandbox()
	kube.SetSandboxStatus(t, a, "web-s", corev1.ConditionTrue, ip2)
	id2 := publish.ShortID(cnitest.ContainerID(ns2))
	c = kube.WaitCondition(t, a, "web-s", 10*time.Second, "True from the new sandbox", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if !strings.HasPrefix(c.Message, "sandbox "+id2+";") {
		t.Errorf("True condition %q does not name the new sandbox %s", c.Message, id2)
	}

	// The sidecar is down across the next recreate, and the new sandbox
	// is up before any marker of it exists.
	stop()
	if _, err := n.Cnitool("del", ns2, args); err != nil {
		t.Fatal(err)
	}
	kube.SetSandboxStatus(t, a, "web-s", corev1.ConditionFalse, ip2)
	kube.SetSandboxStatus(t, a, "web-s", corev1.ConditionTrue, n.Prefix+"250")
	if _, c := a.Condition("web-s"); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("the test needs the old True in place before the sidecar restarts; got %+v", c)
	}
	kube.StartSidecarProc(t, a.AgentKubeconfig, n.StateDir, kube.SidecarNode, "--unobserved-grace", "5m")
	c = kube.WaitCondition(t, a, "web-s", 10*time.Second, "False after a restart over a sandbox with no marker", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	if c.Reason != publish.ReasonSandboxChanged || !strings.Contains(c.Message, "sandbox "+id2+" is gone") {
		t.Errorf("condition after the restart = %+v, want SandboxChanged naming %s", c, id2)
	}
}
