//go:build integration

package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// offSwitchBound is the bound: within it, on every node, no new
// gates, gated pods released, ADD waiting on nothing.
const offSwitchBound = 30 * time.Second

// offSwitchScenario: the release's kubectl netready off, on the real node
// while a check can never be met (the agent never programs the pods):
// within the bound the node notes it for ADD; a gated pod starts and
// turns Ready (True, NetreadyOff, a Warning Event), and a pod of a
// labelled namespace gets no gate; kubectl netready on undoes it: a new
// pod of that namespace is gated again, a new gated pod is checked, and
// the released one stays Ready.
func offSwitchScenario(n *kube.K8sNode, t *testing.T) {
	ctx := context.Background()
	n.Kubectl("create", "namespace", "offns")
	n.Kubectl("label", "namespace", "offns", "netready.io/readiness-gate=enabled")
	// Whether the mutating policy gates a new pod of a labelled namespace,
	// asked with a dry run.
	gates := func() (int, error) {
		p := kube.NodePod("dry", false)
		p.Namespace = "offns"
		q, err := n.Admin.CoreV1().Pods("offns").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return 0, err
		}
		return len(q.Spec.ReadinessGates), nil
	}
	before := n.Allocations()
	defer func() {
		n.Netready("on")
		for _, name := range []string{"off-gated", "on-gated"} {
			n.Admin.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		n.WaitFor("the off scenario's addresses released", 2*time.Minute, func() bool { return n.Allocations() <= before })
	}()

	turned := time.Now()
	out, code := n.Netready("off")
	t.Logf("kubectl netready off (exit %d):\n%s", code, out)
	if code != 0 || !strings.Contains(out, "matchCondition "+offswitch.MatchCondition+" added") {
		t.Fatalf("kubectl netready off exited %d, want 0 and the policy's matchCondition added", code)
	}
	n.WaitFor("the node's off note", offSwitchBound, func() bool { return offswitch.Noted(n.Path("state")) })
	t.Logf("off: the node noted it %.1fs after the command", time.Since(turned).Seconds())
	n.WaitFor("no gate on a new pod of a labelled namespace", offSwitchBound, func() bool { g, err := gates(); return err == nil && g == 0 })

	created := time.Now()
	n.CreatePod(kube.NodePod("off-gated", true))
	p := n.WaitPod("off-gated", "Ready while its check can never be met", offSwitchBound, kube.PodReady)
	t.Logf("off: a gated pod whose check is never met Ready %.1fs after create", time.Since(created).Seconds())
	if c := publish.Current(p, kube.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue || c.Reason != publish.ReasonOff {
		t.Errorf("condition = %+v, want True, %s", c, publish.ReasonOff)
	}
	if m := n.MarkerFor(p); m == nil || m.State != marker.StatePending {
		t.Errorf("marker while off = %+v, want pending: ADD did not wait, and claims nothing", m)
	}
	n.WaitFor("a Warning NetreadyOff Event", offSwitchBound, func() bool {
		evs, _ := n.Admin.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		return evs != nil && slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool {
			return e.Regarding.UID == p.UID && e.Type == corev1.EventTypeWarning && e.Reason == publish.ReasonOff
		})
	})

	turned = time.Now()
	out, code = n.Netready("on")
	t.Logf("kubectl netready on (exit %d):\n%s", code, out)
	if code != 0 {
		t.Fatalf("kubectl netready on exited %d", code)
	}
	n.WaitFor("the node's off note removed", offSwitchBound, func() bool { return !offswitch.Noted(n.Path("state")) })
	t.Logf("on: the node noted it %.1fs after the command", time.Since(turned).Seconds())
	policy, err := n.Admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, "netready-readiness-gate", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(policy.Spec.MatchConditions, func(m admissionv1.MatchCondition) bool { return m.Name == offswitch.MatchCondition }) {
		t.Errorf("the policy keeps matchCondition %s after kubectl netready on", offswitch.MatchCondition)
	}
	n.WaitFor("a gate on a new pod of a labelled namespace again", offSwitchBound, func() bool { g, err := gates(); return err == nil && g == 1 })
	n.Program("on-gated")
	n.CreatePod(kube.NodePod("on-gated", true))
	q := n.WaitPod("on-gated", "Ready, programmed", time.Minute, kube.PodReady)
	if c := publish.Current(q, kube.NodeConditionType); c == nil || c.Reason != publish.ReasonProgrammed {
		t.Errorf("a new pod after kubectl netready on: condition %+v, want %s", c, publish.ReasonProgrammed)
	}
	if c := publish.Current(n.Pod("off-gated"), kube.NodeConditionType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("the pod released while off lost its True once on: %+v", c)
	}
}
