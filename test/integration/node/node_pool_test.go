//go:build integration

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/nodewriter"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// nodePoolUsable is what host-local hands out of the node's /28: .2 to .14.
const nodePoolUsable = 13

// nodeEvent waits for the sidecar's Event about the Node with reason
// whose note contains want, and returns its note.
func nodeEvent(n *kube.K8sNode, reason, want string) string {
	n.T.Helper()
	var note string
	n.WaitFor("a "+reason+" Event on the Node naming "+want, 30*time.Second, func() bool {
		evs, _ := n.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == kube.NodeName && e.Reason == reason &&
				e.ReportingController == "netready-sidecar" && e.Action != "Test" && strings.Contains(e.Note, want) {
				note = e.Note
				return true
			}
		}
		return false
	})
	return note
}

// lastAllocation is when host-local wrote its newest allocation file.
func lastAllocation(n *kube.K8sNode) time.Time {
	entries, _ := os.ReadDir(n.Path("ipam/nr-node"))
	var last time.Time
	for _, e := range entries {
		if net.ParseIP(e.Name()) == nil {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().After(last) {
			last = info.ModTime()
		}
	}
	return last
}

func nodeObject(n *kube.K8sNode) *corev1.Node {
	n.T.Helper()
	node, err := n.Admin.CoreV1().Nodes().Get(context.Background(), kube.NodeName, metav1.GetOptions{})
	if err != nil {
		n.T.Fatal(err)
	}
	return node
}

// sidecarClient authenticates as the running sidecar does: its
// ServiceAccount, with a token bound to its pod (which carries the node).
func sidecarClient(n *kube.K8sNode) *kubernetes.Clientset {
	n.T.Helper()
	ctx := context.Background()
	pods, err := n.Admin.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: "app=netready"})
	if err != nil || len(pods.Items) != 1 {
		n.T.Fatalf("the netready pod: %v (%d pods)", err, len(pods.Items))
	}
	pod := pods.Items[0]
	exp := int64(600)
	tr, err := n.Admin.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, pod.Spec.ServiceAccountName, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		n.T.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: fmt.Sprintf("https://127.0.0.1:%d", kube.NodeAPIPort), BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: n.Path("pki/ca.crt")}})
}

// poolScenario: the node's /28 pod pool runs out. The sidecar taints the
// node NoSchedule; the node stays Ready and nothing is evicted; the next
// pod waits in Pending; freeing two addresses lifts the taint and the
// pod runs. The sidecar's own identity cannot widen what it writes.
func poolScenario(n *kube.K8sNode, t *testing.T) {
	ctx := context.Background()
	times := kube.WatchTaint(t, n.Admin, kube.NodeName)
	if nodewriter.Has(nodeObject(n)) {
		t.Fatal("the node is tainted before its pool is full")
	}
	free := nodePoolUsable - n.Allocations()
	var fill []string
	for i := range free {
		name := fmt.Sprintf("fill-%d", i)
		fill = append(fill, name)
		n.Program(name)
		n.CreatePod(kube.NodePod(name, false))
	}
	for _, name := range fill {
		n.WaitPod(name, "Running", 2*time.Minute, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
	}
	n.WaitFor("the taint", 30*time.Second, func() bool { a, _ := times.FirstTimes(); return !a.IsZero() })
	added, _ := times.FirstTimes()
	last := lastAllocation(n)
	t.Logf("pool: %d pods filled the /28; taint on the Node %d ms after host-local's last allocation", free, added.Sub(last).Milliseconds())
	if d := added.Sub(last); d > time.Second {
		t.Errorf("the taint came %s after the last allocation; the goal is within 1 s", d)
	}
	node := nodeObject(n)
	c := nodewriter.Current(node)
	if c == nil || c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, fmt.Sprintf("nr-node: %d of %d addresses in use", nodePoolUsable, nodePoolUsable)) {
		t.Errorf("the %s condition = %+v", nodewriter.ConditionType, c)
	} else {
		t.Logf("pool: kubectl describe node shows %s=True: %s", nodewriter.ConditionType, c.Message)
	}
	if len(node.Spec.Taints) != 1 {
		t.Errorf("taints = %+v, want netready's only", node.Spec.Taints)
	}
	t.Logf("pool: the Node's Event: %s", nodeEvent(n, nodewriter.ReasonExhausted, fmt.Sprintf("nr-node: %d of %d addresses in use", nodePoolUsable, nodePoolUsable)))

	// The node's only taint is netready's (checked above), so it is the
	// one the scheduler means.
	t.Logf("pool: the scheduler: %s", n.CreateUnschedulable("overflow"))
	t.Logf("pool: kubectl netready explain overflow:\n%s", n.ExplainSays("overflow", 1, "pod default/overflow is not scheduled",
		"tainted netready.io/pod-ips-exhausted:NoSchedule", fmt.Sprintf("nr-node: %d of %d addresses in use", nodePoolUsable, nodePoolUsable),
		fmt.Sprintf("pool:        nr-node (host-local) on nr-node: 0 of %d free (minFree 1): exhausted", nodePoolUsable)))
	status, code := n.Netready("status")
	// Exit 1: a tainted node is a problem status names.
	if code != 1 || !regexp.MustCompile(`(?m)^nr-node\s+netready-\S+\s+\S+\s+true\s+true\s`).MatchString(status) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^nr-node\s+nr-node\s+host-local\s+0 of %d free\s+1\s+exhausted$`, nodePoolUsable)).MatchString(status) {
		t.Errorf("kubectl netready status (exit %d) does not show the taint and the pool:\n%s", code, status)
	} else {
		t.Logf("pool: kubectl netready status:\n%s", status)
	}

	t.Run("60 s exhausted: Ready, nothing evicted", func(t *testing.T) {
		n.T = t
		before, _ := n.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			if ok, msg := n.Ready(); !ok {
				t.Fatalf("the Node went NotReady with its pool full: %s", msg)
			}
			pods, err := n.Admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods.Items) != len(before.Items) {
				t.Fatalf("%d pods, had %d: something was evicted", len(pods.Items), len(before.Items))
			}
			for i := range pods.Items {
				p := &pods.Items[i]
				switch {
				case p.Name == "overflow":
					if p.Spec.NodeName != "" {
						t.Fatalf("the overflow pod was scheduled onto the tainted node")
					}
				case p.DeletionTimestamp != nil || !kube.PodReady(p):
					t.Fatalf("pod %s lost Ready or is being deleted while the pool was full: %+v", p.Name, p.Status.Conditions)
				}
			}
		}
		t.Logf("pool: 60 s with the pool full: Node Ready, %d pods Ready, none evicted, overflow Pending", len(before.Items)-1)
	})
	n.T = t

	t.Run("the sidecar's identity is held to its taint, condition and node", func(t *testing.T) {
		n.T = t
		other, err := n.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "nr-other"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Admin.CoreV1().Nodes().Delete(ctx, other.Name, metav1.DeleteOptions{})
		sc := sidecarClient(n)
		own := nodeObject(n)
		taints := func(ts ...corev1.Taint) []byte {
			data, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": ts}})
			return data
		}
		ours := corev1.Taint{Key: nodewriter.Key, Effect: corev1.TaintEffectNoSchedule}
		denied := []struct {
			name, node, sub string
			pt              types.PatchType
			body            []byte
			want            string
		}{
			{"another taint", kube.NodeName, "", types.MergePatchType, taints(ours, corev1.Taint{Key: "example.com/x", Effect: corev1.TaintEffectNoSchedule}), "may only add or remove the taint"},
			{"its taint as NoExecute", kube.NodeName, "", types.MergePatchType, taints(corev1.Taint{Key: nodewriter.Key, Effect: corev1.TaintEffectNoExecute}), "with effect NoSchedule"},
			{"its taint on another node", other.Name, "", types.MergePatchType, taints(ours), "may only write its own Node"},
			{"a label", kube.NodeName, "", types.MergePatchType, []byte(`{"metadata":{"labels":{"nr":"x"}}}`), "may not change a Node's labels"},
			{"a label through nodes/status", kube.NodeName, "status", types.MergePatchType, []byte(`{"metadata":{"labels":{"nr":"x"}}}`), "may not change a Node's labels"},
			{"unschedulable", kube.NodeName, "", types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), "may only change the taints"},
			{"the Ready condition", kube.NodeName, "status", types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"x"}]}}`), "may only change the Node condition"},
			{"its condition on another node", other.Name, "status", types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"NetworkPoolExhausted","status":"True"}]}}`), "may only write its own Node"},
		}
		for _, d := range denied {
			var subs []string
			if d.sub != "" {
				subs = []string{d.sub}
			}
			_, err := sc.CoreV1().Nodes().Patch(ctx, d.node, d.pt, d.body, metav1.PatchOptions{}, subs...)
			if err == nil || !(apierrors.IsInvalid(err) || apierrors.IsForbidden(err)) || !strings.Contains(err.Error(), d.want) {
				t.Errorf("denied: %s: patch = %v, want a denial containing %q", d.name, err, d.want)
			}
		}
		// Events: only its own kinds, and about its own Node only the pool's.
		event := func(kind, name, ns, reason string) error {
			ref := corev1.ObjectReference{Kind: kind, APIVersion: "v1", Name: name}
			if kind != "Node" {
				ref.Namespace = ns
			}
			_, err := sc.EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
				ObjectMeta: metav1.ObjectMeta{GenerateName: "nr-", Namespace: ns}, EventTime: metav1.NowMicro(),
				ReportingController: "netready-sidecar", ReportingInstance: "netready-sidecar-" + kube.NodeName, Action: "Test", Type: corev1.EventTypeNormal,
				Reason: reason, Regarding: ref,
			}, metav1.CreateOptions{})
			return err
		}
		for _, d := range []struct{ what, kind, name, ns, reason string }{
			{"a pool Event about another node", "Node", other.Name, "default", nodewriter.ReasonExhausted},
			{"another reason about its Node", "Node", kube.NodeName, "default", "NodeNotReady"},
			{"another reason about a pod", "Pod", "web", "default", "Killing"},
			{"an Event about a Service", "Service", "kubernetes", "default", publish.ReasonProgrammed},
		} {
			if err := event(d.kind, d.name, d.ns, d.reason); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("denied: %s: create = %v, want a denial", d.what, err)
			}
		}
		if err := event("Node", kube.NodeName, "default", nodewriter.ReasonAvailable); err != nil {
			t.Errorf("the sidecar's identity recording a pool Event about its own Node = %v, want allowed", err)
		}
		// Control: the same identity may write its own condition.
		if _, err := sc.CoreV1().Nodes().Patch(ctx, kube.NodeName, types.StrategicMergePatchType, nodewriter.StatusPatch(own, nodewriter.Condition(true, "control"), time.Now(), true), metav1.PatchOptions{}, "status"); err != nil {
			t.Errorf("the sidecar's identity writing its own condition = %v, want allowed", err)
		}
		after := nodeObject(n)
		if after.Labels["nr"] != "" || after.Spec.Unschedulable || len(after.Spec.Taints) != 1 || !nodewriter.Has(after) {
			t.Errorf("the node changed despite the denials: labels %v, taints %+v", after.Labels, after.Spec.Taints)
		}
		if ok, _ := n.Ready(); !ok {
			t.Error("the node's Ready condition changed")
		}
	})
	n.T = t

	for _, name := range fill[:2] {
		if err := n.Admin.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	deleted := time.Now()
	n.WaitFor("the taint lifted", time.Minute, func() bool { _, r := times.FirstTimes(); return !r.IsZero() })
	_, removed := times.FirstTimes()
	n.WaitPod("overflow", "scheduled and Ready", 2*time.Minute, kube.PodReady)
	t.Logf("pool: two pods deleted; taint lifted %.1fs later (after kubelet's DELs freed the addresses), the overflow pod Ready %.1fs after the deletes",
		removed.Sub(deleted).Seconds(), time.Since(deleted).Seconds())
	if c := nodewriter.Current(nodeObject(n)); c == nil || c.Status != corev1.ConditionFalse {
		t.Errorf("the condition after the pool freed up = %+v", c)
	}
	t.Logf("pool: the Node's Event: %s", nodeEvent(n, nodewriter.ReasonAvailable, fmt.Sprintf("nr-node: %d of %d addresses in use", nodePoolUsable-2, nodePoolUsable)))
	// Room for the scenarios after this one.
	for _, name := range append(fill[2:], "overflow") {
		n.Admin.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}
	n.WaitFor("the fill pods' addresses released", 2*time.Minute, func() bool { return n.Allocations() <= nodePoolUsable-free })
}
