//go:build integration

package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/attachment"
	"github.com/netready/netready/pkg/config"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness/kube"
)

// publishedTotal sums netready_conditions_published_total from /metrics.
func publishedTotal(t *testing.T, listen string) int {
	t.Helper()
	total := 0
	for _, m := range regexp.MustCompile(`(?m)^netready_conditions_published_total\{[^}]*\} (\d+)$`).FindAllStringSubmatch(kube.MetricsText(t, listen), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	return total
}

// settledPublishes waits until the sidecar has published nothing new for
// two seconds, and returns its count.
func settledPublishes(t *testing.T, listen string) int {
	t.Helper()
	n := publishedTotal(t, listen)
	for quiet := 0; quiet < 4; quiet++ {
		time.Sleep(500 * time.Millisecond)
		if m := publishedTotal(t, listen); m != n {
			n, quiet = m, 0
		}
	}
	return n
}

// TestSidecarScope, on a real kube-apiserver with the sidecar's own RBAC:
// a pod with two attachments settles after one patch per real change and
// turns True only when both are ready; a hostNetwork pod is True at once;
// a pod netready never saw turns True, reason NotObserved, after the
// grace; an ungated pod is never patched. Events are read back.
func TestSidecarScope(t *testing.T) {
	a := kube.StartAPIServer(t)
	stateDir := t.TempDir()
	listen, _ := kube.StartSidecar(t, a, stateDir, kube.SidecarNode, "--unobserved-grace", "2s")
	store := marker.Store{Dir: stateDir}
	write := func(pod *corev1.Pod, network, ifName string, pending *marker.Pending) {
		t.Helper()
		m := &marker.Marker{
			Version: marker.Version, Network: network, ContainerID: "c" + string(pod.UID)[:8], IfName: ifName,
			Pod: attachment.Pod{Namespace: pod.Namespace, Name: pod.Name, UID: string(pod.UID)},
			IPs: []string{"10.200.99.5/24"}, State: marker.StateReady, CreatedAt: marker.Time{Time: time.Now()}, WaitedMs: 4,
		}
		if pending != nil {
			m.State, m.Pending = marker.StatePending, pending
			m.Checks = []marker.CheckResult{{Kind: "file", Target: pending.Checks[0].Path, Why: "file does not exist (yet)"}}
		} else {
			m.ReadyAt = &marker.Time{Time: time.Now()}
		}
		if err := store.Write(m); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("two attachments, one condition", func(t *testing.T) {
		pod := a.NewPod("multi", kube.SidecarNode)
		flag := filepath.Join(t.TempDir(), "net1-programmed")
		before := publishedTotal(t, listen)
		// Three changes, one at a time: eth0 ready, net1 pending, net1 ready.
		write(pod, "podnet", "eth0", nil)
		kube.WaitCondition(t, a, "multi", 10*time.Second, "True with eth0 alone", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		write(pod, "storagenet", "net1", &marker.Pending{Checks: []config.CheckConf{{Kind: config.KindFile, Path: flag}}})
		c := kube.WaitCondition(t, a, "multi", 10*time.Second, "False while net1 is pending", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
		if !strings.Contains(c.Message, "network podnet (eth0) programmed") || !strings.Contains(c.Message, "network storagenet (net1): waiting for") {
			t.Errorf("message %q does not name each network", c.Message)
		}
		// Two markers that disagree must not flap: nothing more is written.
		if n := settledPublishes(t, listen) - before; n != 2 {
			t.Errorf("patches for two changes = %d, want 2", n)
		}
		// The sidecar's re-check sees the file, rewrites the marker as
		// ready, and the pod turns True.
		if err := os.WriteFile(flag, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		c = kube.WaitCondition(t, a, "multi", 15*time.Second, "True once both are ready", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		if !strings.Contains(c.Message, "storagenet (net1) programmed") {
			t.Errorf("message %q", c.Message)
		}
		if n := settledPublishes(t, listen) - before; n != 3 {
			t.Errorf("patches for three changes = %d, want 3", n)
		}
		evs := strings.Join(kube.EventsFor(t, a, pod), "\n")
		for _, want := range []string{"Warning NetworkNotProgrammed", "Normal NetworkProgrammed"} {
			if !strings.Contains(evs, want) {
				t.Errorf("events lack %q:\n%s", want, evs)
			}
		}
	})

	t.Run("hostNetwork pod", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "hostnet", Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: kube.SidecarNode, HostNetwork: true,
				ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "networking.kubernetes.io/pod-network-ready"}},
				Containers:     []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		if _, err := a.Admin.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c := kube.WaitCondition(t, a, "hostnet", 10*time.Second, "True for hostNetwork", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		if c.Reason != "HostNetwork" {
			t.Errorf("condition = %+v, want reason HostNetwork", c)
		}
	})

	t.Run("pod netready never saw", func(t *testing.T) {
		pod := a.NewPod("unseen", kube.SidecarNode)
		// The kubelet's part: the sandbox is up and has an IP.
		pod.Status.PodIP = "10.200.99.7"
		pod.Status.PodIPs = []corev1.PodIP{{IP: "10.200.99.7"}}
		pod.Status.StartTime = &metav1.Time{Time: time.Now()}
		pod, err := a.Admin.CoreV1().Pods("default").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if _, c := a.Condition("unseen"); c != nil {
			t.Fatalf("condition within the grace: %+v", c)
		}
		c := kube.WaitCondition(t, a, "unseen", 10*time.Second, "True after the grace", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		if c.Reason != "NotObserved" {
			t.Errorf("condition = %+v, want reason NotObserved", c)
		}
		if evs := strings.Join(kube.EventsFor(t, a, pod), "\n"); !strings.Contains(evs, "Warning NotObserved: no netready marker") {
			t.Errorf("events lack a Warning NotObserved:\n%s", evs)
		}
	})

	t.Run("ungated pod is never patched", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: kube.SidecarNode, Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
		}
		pod, err := a.Admin.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		write(pod, "podnet", "eth0", nil)
		time.Sleep(2 * time.Second)
		if _, c := a.Condition("plain"); c != nil {
			t.Errorf("ungated pod got %+v", c)
		}
	})
}
