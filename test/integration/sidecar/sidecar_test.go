//go:build integration

package sidecar

import (
	"context"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// writeAtomically replaces a file as the plugin writes markers: a temp file
// renamed over it, so that no reader sees it half-written.
func writeAtomically(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// addPending runs the real plugin through cnitool for pod, with a timeout
// shorter than the agent's delay, so ADD proceeds with a pending marker.
func addPending(t *testing.T, n *cnitest.TestNet, agent *cnitest.TestAgent, pod *corev1.Pod, delay time.Duration) string {
	t.Helper()
	nsPath, m := addPod(t, n, agent, pod, delay)
	if m.State != marker.StatePending {
		t.Fatalf("marker for %s is %s, want pending", pod.Name, m.State)
	}
	return nsPath
}

// addPod runs the real plugin through cnitool for pod; the agent programs
// it after delay.
func addPod(t *testing.T, n *cnitest.TestNet, agent *cnitest.TestAgent, pod *corev1.Pod, delay time.Duration) (string, *marker.Marker) {
	t.Helper()
	netns := cnitest.NewNS(t)
	agent.SetPod(cnitest.ContainerID(netns.Path()), pod.Namespace, pod.Name, delay)
	args := "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + pod.Namespace + ";K8S_POD_NAME=" + pod.Name + ";K8S_POD_UID=" + string(pod.UID)
	if _, err := n.Add(netns.Path(), args); err != nil {
		t.Fatal(err)
	}
	return netns.Path(), n.ReadMarker(cnitest.ContainerID(netns.Path()), "eth0")
}

// TestSidecarPublishesFalseUntilTheAgentPrograms: against a real kube-apiserver, with the RBAC of deploy/ and
// markers the real plugin wrote through cnitool, the sidecar publishes
// False while a marker is pending and True once the agent programs the pod;
// never patches a recreated pod from an old marker; loses no transition
// across an API server restart; and, by RBAC, cannot patch the pods
// resource itself.
func TestSidecarPublishesFalseUntilTheAgentPrograms(t *testing.T) {
	a := kube.StartAPIServer(t)
	n, agent := cnitest.NewAgentNet(t, "policy-agent.conflist", 10*time.Second, func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "1s"
		n.Netready()["onTimeout"] = "proceed"
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}, map[string]any{"kind": "nftables", "table": "", "set": "pods4"}}
	})
	listen, logs := kube.StartSidecar(t, a, n.StateDir, kube.SidecarNode, "--pending-timeout", "2m")

	t.Run("pending then ready", func(t *testing.T) {
		pod := a.NewPod("web-0", kube.SidecarNode)
		addPending(t, n, agent, pod, 4*time.Second)
		c := kube.WaitCondition(t, a, "web-0", 10*time.Second, "False while pending", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
		if c.Reason != "NetworkNotProgrammed" || !strings.Contains(c.Message, "nftables set inet/"+agent.Table+"/pods4") {
			t.Errorf("pending condition = %+v, want reason NetworkNotProgrammed naming the unmet check", c)
		}
		falseAt := c.LastTransitionTime
		c = kube.WaitCondition(t, a, "web-0", 20*time.Second, "True once programmed", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		if c.Reason != "NetworkProgrammed" || !c.LastTransitionTime.After(falseAt.Time) && !c.LastTransitionTime.Equal(&falseAt) {
			t.Errorf("ready condition = %+v", c)
		}
	})

	t.Run("every ADD outcome is counted, a fail-mode timeout too", func(t *testing.T) {
		n.Netready()["onTimeout"] = "fail"
		n.Write()
		defer func() { n.Netready()["onTimeout"] = "proceed"; n.Write() }()
		pod := a.NewPod("web-f", kube.SidecarNode)
		netns := cnitest.NewNS(t)
		agent.SetPod(cnitest.ContainerID(netns.Path()), pod.Namespace, pod.Name, time.Hour)
		args := "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-f;K8S_POD_UID=" + string(pod.UID)
		if out, err := n.Add(netns.Path(), args); err == nil || !strings.Contains(out+err.Error(), "timed out") {
			t.Fatalf("ADD in fail mode with the pod never programmed = %v %s, want a timeout", err, out)
		}
		if _, err := os.Stat(n.MarkerPath(cnitest.ContainerID(netns.Path()), "eth0")); !os.IsNotExist(err) {
			t.Errorf("a fail-mode timeout left a marker: %v", err)
		}
		want := []string{
			`netready_add_wait_seconds_count{network="` + n.Name + `",outcome="timeout_fail"} 1`,
			`netready_add_wait_seconds_count{network="` + n.Name + `",outcome="timeout_proceed"} 1`,
		}
		for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
			m := kube.MetricsText(t, listen)
			if !slices.ContainsFunc(want, func(w string) bool { return !strings.Contains(m, w) }) {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("/metrics lacks %v:\n%s", want, harness.GrepLines(m, "netready_add_wait_seconds_count"))
			}
		}
	})

	t.Run("recreated pod is not patched from the old marker", func(t *testing.T) {
		ctx := context.Background()
		old := a.NewPod("web-1", kube.SidecarNode)
		nsPath, _ := addPod(t, n, agent, old, 100*time.Millisecond)
		kube.WaitCondition(t, a, "web-1", 20*time.Second, "True for the first pod", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		zero := int64(0)
		if err := a.Admin.CoreV1().Pods("default").Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(50 * time.Millisecond) {
			if _, err := a.Admin.CoreV1().Pods("default").Get(ctx, "web-1", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
		}
		fresh := a.NewPod("web-1", kube.SidecarNode)
		// Rewrite the old marker so that the sidecar looks at it again.
		path := n.MarkerPath(cnitest.ContainerID(nsPath), "eth0")
		data, _ := os.ReadFile(path)
		os.WriteFile(path, data, 0o644)
		time.Sleep(2 * time.Second)
		if _, c := a.Condition("web-1"); c != nil {
			t.Errorf("the recreated pod (uid %s) got %+v from the marker of uid %s", fresh.UID, c, old.UID)
		}
		if !strings.Contains(logs.String(), "the pod was recreated") {
			t.Errorf("sidecar did not log the recreated pod")
		}
	})

	// A marker the sidecar can no longer read (here a version this
	// sidecar does not know, as during a botched upgrade) keeps its pod
	// not ready, naming the file; once it reads again, the pod is True.
	t.Run("unreadable marker keeps the pod not ready", func(t *testing.T) {
		pod := a.NewPod("web-u", kube.SidecarNode)
		nsPath, _ := addPod(t, n, agent, pod, 100*time.Millisecond)
		kube.WaitCondition(t, a, "web-u", 20*time.Second, "True once programmed", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		path := n.MarkerPath(cnitest.ContainerID(nsPath), "eth0")
		good, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		bad := strings.Replace(string(good), `"version": 1`, `"version": 2`, 1)
		if bad == string(good) {
			t.Fatalf("marker has no version 1 to change: %s", good)
		}
		writeAtomically(t, path, []byte(bad))
		c := kube.WaitCondition(t, a, "web-u", 10*time.Second, "False while unreadable", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
		if c.Reason != "MarkerUnreadable" || !strings.Contains(c.Message, path) || !strings.Contains(c.Message, "version 2") {
			t.Errorf("condition = %+v, want reason MarkerUnreadable naming %s and its version", c, path)
		}
		writeAtomically(t, path, good)
		kube.WaitCondition(t, a, "web-u", 10*time.Second, "True once it reads again", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	})

	t.Run("API server restart loses no transition", func(t *testing.T) {
		pod := a.NewPod("web-2", kube.SidecarNode)
		addPending(t, n, agent, pod, 5*time.Second)
		kube.WaitCondition(t, a, "web-2", 10*time.Second, "False while pending", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionFalse })
		a.StopAPI()
		// The agent programs the pod while the API server is down; the
		// sidecar's re-check writes the ready marker and cannot publish.
		time.Sleep(7 * time.Second)
		a.StartAPI()
		kube.WaitCondition(t, a, "web-2", 30*time.Second, "True after the restart", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
		m := kube.MetricsText(t, listen)
		if !strings.Contains(m, "netready_api_errors_total{reason=") {
			t.Errorf("no API errors counted across the outage:\n%s", m)
		}
	})

	// RBAC only: the sidecar cannot patch the pods resource itself. What it
	// may do through pods/status is the admission policy's job, proved in
	// TestDeployLetsTheSidecarWriteOnlyItsCondition.
	t.Run("sidecar identity cannot patch the pod resource", func(t *testing.T) {
		agentClient := kubernetes.NewForConfigOrDie(a.AgentConfig)
		ctx := context.Background()
		_, err := agentClient.CoreV1().Pods("default").Patch(ctx, "web-0", types.StrategicMergePatchType,
			[]byte(`{"spec":{"activeDeadlineSeconds":1}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("spec patch as the sidecar = %v, want Forbidden", err)
		}
		_, err = agentClient.CoreV1().Pods("default").Patch(ctx, "web-0", types.StrategicMergePatchType,
			[]byte(`{"metadata":{"labels":{"hijacked":"yes"}}}`), metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("label patch as the sidecar = %v, want Forbidden", err)
		}
		if _, err := agentClient.CoreV1().Pods("default").Get(ctx, "web-0", metav1.GetOptions{}); err != nil {
			t.Errorf("the sidecar cannot even read pods: %v", err)
		}
	})

	if resp, err := http.Get("http://" + listen + "/healthz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz = %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	m := kube.MetricsText(t, listen)
	for _, want := range []string{"netready_publish_latency_seconds_count", "netready_marker_wait_seconds_count{state=\"pending\"}", "netready_pending_attachments",
		"netready_build_info{version=", "\nnetready_node_tainted 0\n", "\ngo_goroutines ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	kube.CheckMetrics(t, m)
}

// TestStalePodUIDIsRefused: the guard of every condition patch, on the real
// kube-apiserver. A pod recreated under its name has a new UID; a patch
// naming the old one must be refused as the sidecar expects (409, or 422
// on metadata.uid: both mean "never this pod again"), and change nothing.
func TestStalePodUIDIsRefused(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	old := a.Create(t, kube.PlainPod("default", "web", "node-a"))
	if err := a.Admin.CoreV1().Pods("default").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	now := a.Create(t, kube.PlainPod("default", "web", "node-a"))
	if now.UID == old.UID {
		t.Fatal("the recreated pod kept its UID")
	}
	body, _ := publish.Patch(old.UID, corev1.PodCondition{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	_, err := a.Admin.CoreV1().Pods("default").Patch(ctx, "web", types.StrategicMergePatchType, body, metav1.PatchOptions{}, "status")
	t.Logf("patch naming the old UID: %v (reason %s)", err, apierrors.ReasonForError(err))
	uidCause := false
	if s, ok := err.(apierrors.APIStatus); ok && s.Status().Details != nil {
		for _, c := range s.Status().Details.Causes {
			uidCause = uidCause || c.Field == "metadata.uid"
		}
	}
	if !apierrors.IsConflict(err) && !(apierrors.IsInvalid(err) && uidCause) {
		t.Errorf("patch naming the old UID = %v, want 409, or 422 with a metadata.uid cause", err)
	}
	if _, c := a.Condition("web"); c != nil {
		t.Errorf("the recreated pod got the condition: %+v", c)
	}
}
