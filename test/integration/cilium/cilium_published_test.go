//go:build integration

package cilium

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/checks"
	"github.com/netready/netready/pkg/marker"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/agents"
	"github.com/netready/netready/test/harness/kube"
)

// TestCiliumPodIsReadyOnlyOnceItsCiliumEndpointIsPublished is issue #52's
// KEP-5709 part on two real cilium-agents, with the real sidecar of node
// A holding the pods' readiness gate (crossNode with the cilium preset,
// and the sidecar's RBAC from components/cilium). A pod whose
// CiliumEndpoint the API server refuses to store (an admission policy
// denies A's agent) starts (ADD does not wait for it), stays not ready,
// its condition naming the missing CiliumEndpoint, while node B indeed
// has no identity for it; once the policy goes, A's agent publishes it,
// and the pod turns Ready on a CiliumEndpoint that is its own sandbox's
// with the agent's identity. With crossNode's "settle", the pod is held
// that much longer after the publish, and its True says so.
func TestCiliumPodIsReadyOnlyOnceItsCiliumEndpointIsPublished(t *testing.T) {
	b := agents.StartCiliumCrossNodeBed(t)
	b.API.ApplyRBAC(harness.RepoPath("deploy", "components", "cilium", "rbac.yaml"))
	kube.StartSidecar(t, b.API, b.State, agents.CiliumNodeA)
	list := b.Chain(map[string]any{"type": "netready", "stateDir": b.State, "timeout": "20s", "onTimeout": "fail", "logFile": b.Log,
		"checks":    []any{map[string]any{"kind": "address"}, map[string]any{"kind": "http", "preset": "cilium", "url": "unix://" + b.A.Sock}},
		"crossNode": map[string]any{}})

	rt, ip, _, err := b.AddGated(list, "pub-0", "web")
	if err != nil {
		t.Fatalf("ADD pub-0: %v\n%s", err, b.A.Log(40))
	}
	kube.SetSandboxStatus(t, b.API, "pub-0", corev1.ConditionTrue, ip)
	cond := kube.WaitCondition(t, b.API, "pub-0", 30*time.Second, "Ready on its CiliumEndpoint", isTrue)
	publishedIsOwn(t, b, "pub-0", rt.ContainerID+":"+rt.IfName, ip)
	t.Logf("pub-0 Ready: %s; node B's identity for %s then: %d", cond.Message, ip, identityOf(b, ip))
	if want := "(cilium-endpoint-published CiliumEndpoint default/pub-0 holds the endpoint's container, identity and IPs: published, whether the other nodes' agents have learned it is not confirmed (no barrier))"; !strings.Contains(cond.Message, want) {
		t.Errorf("pub-0's True says %q; want it to say what it rests on across nodes: %q", cond.Message, want)
	}

	// crossNode's settle: once published, the sidecar holds the pod 3 s
	// more, and the True says that the hold was statistical.
	settled := b.Chain(map[string]any{"type": "netready", "stateDir": b.State, "timeout": "20s", "onTimeout": "fail", "logFile": b.Log,
		"checks":    []any{map[string]any{"kind": "address"}, map[string]any{"kind": "http", "preset": "cilium", "url": "unix://" + b.A.Sock}},
		"crossNode": map[string]any{"settle": "3s"}})
	rt, ip, _, err = b.AddGated(settled, "pub-1", "web")
	if err != nil {
		t.Fatalf("ADD pub-1: %v\n%s", err, b.A.Log(40))
	}
	kube.SetSandboxStatus(t, b.API, "pub-1", corev1.ConditionTrue, ip)
	cond = kube.WaitCondition(t, b.API, "pub-1", 30*time.Second, "Ready after the settle hold", isTrue)
	publishedIsOwn(t, b, "pub-1", rt.ContainerID+":"+rt.IfName, ip)
	if want := "published, then held 3s (crossNode.settle): statistical, whether the other nodes' agents have learned it is not confirmed"; !strings.Contains(cond.Message, want) {
		t.Errorf("pub-1's True says %q; want %q", cond.Message, want)
	}
	if m := b.Marker(rt); m.ReadyAt == nil || m.ReadyAt.Sub(m.CreatedAt.Time) < 3*time.Second {
		t.Errorf("pub-1's marker: ready at %v, created at %v: the 3 s hold after the publish did not hold it", m.ReadyAt, m.CreatedAt)
	}

	denyCiliumEndpoint(t, b.API, "held-0")
	rt, ip, took, err := b.AddGated(list, "held-0", "web")
	if err != nil {
		t.Fatalf("ADD held-0 while its CiliumEndpoint is refused: %v (ADD must not wait for it)", err)
	}
	if took > 15*time.Second {
		t.Errorf("ADD held-0 took %s: it must not wait for the CiliumEndpoint", took)
	}
	kube.SetSandboxStatus(t, b.API, "held-0", corev1.ConditionTrue, ip)
	const want = "not published yet: the API server has no CiliumEndpoint default/held-0"
	// The first message is the ADD's; the re-check's comes once the
	// sidecar's pacing of message-only changes (30 s) allows.
	kube.WaitCondition(t, b.API, "held-0", 45*time.Second, "not ready, naming the missing CiliumEndpoint", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse && strings.Contains(c.Message, want)
	})
	kube.Stays(t, b.API, "held-0", 5*time.Second, "not ready while the CiliumEndpoint is refused", func(c *corev1.PodCondition) bool {
		return c.Status == corev1.ConditionFalse
	})
	if id := identityOf(b, ip); id > 2 {
		t.Errorf("node B has identity %d for held-0 (%s) without its CiliumEndpoint: the bed does not show what B learns from", id, ip)
	}
	if m := b.Marker(rt); m.State != marker.StatePending {
		t.Errorf("held-0's marker is %s, want pending while its CiliumEndpoint is refused", m.State)
	}

	if err := b.API.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), "deny-cep", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The agent's endpoint sync retries every 10 s.
	cond = kube.WaitCondition(t, b.API, "held-0", 90*time.Second, "Ready once the CiliumEndpoint is published", isTrue)
	publishedIsOwn(t, b, "held-0", rt.ContainerID+":"+rt.IfName, ip)
	m := b.Marker(rt)
	var r *marker.CheckResult
	for i := range m.Checks {
		if m.Checks[i].Kind == checks.KindCiliumPublished {
			r = &m.Checks[i]
		}
	}
	if m.State != marker.StateReady || r == nil || !r.Ready {
		t.Errorf("held-0's marker: %s, cross-node result %+v; want ready with %s met", m.State, r, checks.KindCiliumPublished)
	}
	t.Logf("held-0 Ready: %s; node B's identity for %s then: %d", cond.Message, ip, identityOf(b, ip))
}

func isTrue(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue }

// publishedIsOwn fails unless the CiliumEndpoint of pod is its sandbox's
// attachment's, with the identity node A's agent has for its IP.
func publishedIsOwn(t *testing.T, b *agents.CiliumCrossNodeBed, pod, attachment, ip string) {
	t.Helper()
	got, _, identity, ok := b.CiliumEndpoint(pod)
	want, err := b.A.Identity(ip)
	if !ok || got != attachment || err != nil || identity != want || identity <= 5 {
		t.Errorf("%s Ready with CiliumEndpoint (found %v) of attachment %q, identity %d; want %q with A's identity %d (%v)", pod, ok, got, identity, attachment, want, err)
	}
}

// identityOf is node B's identity for ip, 0 when it has none.
func identityOf(b *agents.CiliumCrossNodeBed, ip string) int64 {
	id, _ := b.B.Identity(ip)
	return id
}

// denyCiliumEndpoint applies an admission policy that refuses to store
// the CiliumEndpoint default/name, and waits until it refuses the admin's
// dry run.
func denyCiliumEndpoint(t *testing.T, a *kube.APIServer, name string) {
	t.Helper()
	ctx := context.Background()
	forbidden := metav1.StatusReasonForbidden
	rules := []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
		Rule:       admissionv1.Rule{APIGroups: []string{"cilium.io"}, APIVersions: []string{"*"}, Resources: []string{"ciliumendpoints", "ciliumendpoints/status"}}}}}
	const msg = "held by the test"
	_, err := a.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-cep"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{MatchConstraints: &admissionv1.MatchResources{ResourceRules: rules},
			Validations: []admissionv1.Validation{{Expression: "object.metadata.name != '" + name + "'", Message: msg, Reason: &forbidden}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-cep"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "deny-cep", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"apiVersion":"cilium.io/v2","kind":"CiliumEndpoint","metadata":{"name":"` + name + `","namespace":"default"}}`
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		err := a.Admin.CoreV1().RESTClient().Post().AbsPath("/apis/cilium.io/v2/namespaces/default/ciliumendpoints").Param("dryRun", "All").
			SetHeader("Content-Type", "application/json").Body([]byte(body)).Do(ctx).Error()
		if err != nil && strings.Contains(err.Error(), msg) {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the policy refusing CiliumEndpoint %s never took effect (last: %v)", name, err)
		}
	}
}
