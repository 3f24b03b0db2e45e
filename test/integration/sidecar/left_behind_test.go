//go:build integration

package sidecar

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/pkg/statedir"
	"github.com/netready/netready/test/harness/kube"
)

// TestLeftBehindBeyondAMessageNeverEarnsTrueFromTheSidecar: a pod's old
// sandbox leaves behind more ready markers (forty attachments) than a
// condition's message can name, and the new sandbox comes up with the same
// IP and no marker. Against a real kube-apiserver, the real sidecar takes
// the True back when the old sandbox goes down, and, also after a restart
// in between, never gives it back from any of the markers: the pod stays
// False, and after the grace is not observed (--unobserved=notready). The
// sidecar remembers them in its state folder, not in the message it cuts.
func TestLeftBehindBeyondAMessageNeverEarnsTrueFromTheSidecar(t *testing.T) {
	a := kube.StartAPIServer(t)
	stateDir := t.TempDir()
	flags := []string{"--unobserved-grace", "3s", "--unobserved", "notready"}
	_, _, stop := kube.StartSidecarProc(t, a.AgentKubeconfig, stateDir, kube.SidecarNode, flags...)
	pod := a.NewPod("web-many", kube.SidecarNode)
	const ip = "10.200.7.5"
	const sandbox = "0123456789ab-old-sandbox"
	store := marker.Store{Dir: stateDir}
	created := time.Now()
	for i := range 40 {
		network, ifName, addr := fmt.Sprintf("net%02d", i), fmt.Sprintf("attachment%02d", i), fmt.Sprintf("192.168.%d.5/24", i)
		if i == 0 {
			network, ifName, addr = "podnet", "eth0", ip+"/24"
		}
		m := &marker.Marker{Version: marker.Version, Network: network, ContainerID: sandbox, IfName: ifName,
			Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)}, IPs: []string{addr},
			State: marker.StateReady, CreatedAt: marker.Time{Time: created}, ReadyAt: &marker.Time{Time: created}, WaitedMs: 3}
		if err := store.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	kube.SetSandboxStatus(t, a, pod.Name, corev1.ConditionTrue, ip)
	kube.WaitCondition(t, a, pod.Name, 10*time.Second, "True from the old sandbox", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })

	// The sandbox goes down in a later second than its ADDs; no DEL
	// reaches netready, so its markers stay.
	time.Sleep(time.Second)
	kube.SetSandboxStatus(t, a, pod.Name, corev1.ConditionFalse, ip)
	c := kube.WaitCondition(t, a, pod.Name, 10*time.Second, "SandboxChanged once the sandbox is down", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonSandboxChanged
	})
	if _, named := publish.ParseLeftBehind(c); len(named) >= 40 {
		t.Fatalf("the message names all %d markers; the test needs more than fit: %q", len(named), c.Message)
	}
	memory, err := os.ReadFile(filepath.Join(stateDir, statedir.PodMemories, string(pod.UID)+statedir.MemorySuffix))
	if err != nil || !strings.Contains(string(memory), "0123456789ab_attachment39") {
		t.Fatalf("the sidecar's memory of the pod (%v) does not name the last marker: %s", err, memory)
	}

	stop()
	kube.StartSidecarProc(t, a.AgentKubeconfig, stateDir, kube.SidecarNode, flags...)
	time.Sleep(time.Second)
	kube.SetSandboxStatus(t, a, pod.Name, corev1.ConditionTrue, ip)
	isFalse := func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse }
	kube.Stays(t, a, pod.Name, 2*time.Second, "False while the new sandbox has no marker", isFalse)
	kube.WaitCondition(t, a, pod.Name, 10*time.Second, "not observed after the grace", func(c *corev1.PodCondition) bool {
		return c.Reason == publish.ReasonNotObserved
	})
	kube.Stays(t, a, pod.Name, 3*time.Second, "False, not observed", isFalse)
}
