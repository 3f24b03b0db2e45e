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

// TestAStaleMarkerEarnsNoTrueForANewSandboxWithItsIP: netready is out of
// the chain when the pod's sandbox is recreated (an agent removed its
// entry), so DEL leaves the old sandbox's ready marker, which the real
// plugin wrote through cnitool, and the new sandbox, which gets the same
// IP, has none. Against a real kube-apiserver, the real sidecar takes the
// True back when the old sandbox goes down, and does not give it back from
// the old marker once the new sandbox is up with the old IP: the pod stays
// False, and after the grace is not observed (--unobserved=notready),
// naming the old marker.
func TestAStaleMarkerEarnsNoTrueForANewSandboxWithItsIP(t *testing.T) {
	a := kube.StartAPIServer(t)
	n := cnitest.NewNet(t, "bridge.conflist", nil)
	kube.StartSidecar(t, a, n.StateDir, kube.SidecarNode, "--unobserved-grace", "3s", "--unobserved", "notready")
	pod := a.NewPod("web-r", kube.SidecarNode)
	args := "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-r;K8S_POD_UID=" + string(pod.UID)
	netns := cnitest.NewNS(t)
	if _, err := n.Add(netns.Path(), args); err != nil {
		t.Fatal(err)
	}
	m := n.ReadMarker(cnitest.ContainerID(netns.Path()), "eth0")
	ip := strings.Split(m.IPs[0], "/")[0]
	old := publish.ShortID(cnitest.ContainerID(netns.Path()))
	kube.SetSandboxStatus(t, a, "web-r", corev1.ConditionTrue, ip)
	kube.WaitCondition(t, a, "web-r", 10*time.Second, "True from the first sandbox", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })

	// The sandbox goes down, in a later second than its ADD (kubelet's
	// times are whole seconds); no DEL reaches netready, so its marker
	// stays.
	time.Sleep(time.Second)
	kube.SetSandboxStatus(t, a, "web-r", corev1.ConditionFalse, ip)
	c := kube.WaitCondition(t, a, "web-r", 10*time.Second, "False once the sandbox is down", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
	if c.Reason != publish.ReasonSandboxChanged || !strings.Contains(c.Message, old+"_eth0") {
		t.Errorf("condition once the sandbox is down = %+v, want SandboxChanged naming %s_eth0", c, old)
	}
	// The new sandbox is up with the same IP, and no marker of its own.
	time.Sleep(time.Second)
	kube.SetSandboxStatus(t, a, "web-r", corev1.ConditionTrue, ip)
	isFalse := func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse }
	kube.Stays(t, a, "web-r", 2*time.Second, "False while the new sandbox has no marker", isFalse)
	c = kube.WaitCondition(t, a, "web-r", 10*time.Second, "not observed after the grace", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonNotObserved
	})
	if c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, old+"_eth0") {
		t.Errorf("condition after the grace = %+v, want NotObserved False naming %s_eth0", c, old)
	}
	kube.Stays(t, a, "web-r", 3*time.Second, "False, not observed", isFalse)
}
