//go:build integration

package sidecar

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// rule matches operations on resources of group.
func rule(group string, resources []string, ops ...admissionv1.OperationType) admissionv1.NamedRuleWithOperations {
	return admissionv1.NamedRuleWithOperations{RuleWithOperations: admissionv1.RuleWithOperations{Operations: ops,
		Rule: admissionv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: resources}}}
}

// podUpdates are the rules of a policy on pods and their status.
var podUpdates = []admissionv1.NamedRuleWithOperations{rule("", []string{"pods", "pods/status"}, admissionv1.Update)}

// otherPolicy applies a ValidatingAdmissionPolicy that is not netready's,
// refusing with reason Forbidden and message when expression is false,
// for every request that matches rules (in namespaces matching
// nsSelector, when set), and waits until it refuses check, made as the
// admin: as the sidecar, netready's policy may be the one named.
func otherPolicy(t *testing.T, d *kube.ScopedDeploy, name string, rules []admissionv1.NamedRuleWithOperations, expression, message string, nsSelector *metav1.LabelSelector, check func() error) {
	t.Helper()
	ctx := context.Background()
	forbidden := metav1.StatusReasonForbidden
	_, err := d.A.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: rules},
			Validations:      []admissionv1.Validation{{Expression: expression, Message: message, Reason: &forbidden}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.A.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources: &admissionv1.MatchResources{NamespaceSelector: nsSelector}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if err := check(); err != nil && strings.Contains(err.Error(), message) {
			return
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the policy %s never took effect", name)
		}
	}
}

// adminPatch sets a new label or annotation (field) on the sidecar's own
// pod through pods/status, as the admin.
func adminPatch(d *kube.ScopedDeploy, field string) error {
	_, err := d.A.Admin.CoreV1().Pods(d.Self.Namespace).Patch(context.Background(), d.Self.Name, types.MergePatchType,
		[]byte(`{"metadata":{"`+field+`":{"netready.io/probe":"`+time.Now().Format("150405.000000000")+`"}}}`), metav1.PatchOptions{}, "status")
	return err
}

// lift deletes the binding of one of netready's policies and waits until
// the sidecar's identity may make write, which it refused.
func lift(t *testing.T, d *kube.ScopedDeploy, binding string, write func() error) {
	t.Helper()
	if err := d.A.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(context.Background(), binding, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); write() != nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s still refuses the sidecar 30 s after its binding was deleted", binding)
		}
	}
}

// liftPodScope lifts netready-sidecar-scope: the sidecar's identity may
// annotate its own pod through pods/status.
func liftPodScope(t *testing.T, d *kube.ScopedDeploy) {
	t.Helper()
	lift(t, d, "netready-sidecar-scope", func() error {
		return d.PatchStatus(d.Self, types.MergePatchType, []byte(`{"metadata":{"annotations":{"netready.io/unscoped":"`+time.Now().Format(time.RFC3339Nano)+`"}}}`))
	})
}

// gatedPod creates a hostNetwork pod on node-a with netready's gate: the
// sidecar sets its condition True at once, with no marker, when it writes.
func gatedPod(t *testing.T, a *kube.APIServer, name string) {
	t.Helper()
	p := kube.PlainPod("default", name, "node-a")
	p.Spec.HostNetwork = true
	p.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}}
	a.Create(t, p)
}

// readyz returns /readyz's answer.
func readyz(t *testing.T, listen string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + listen + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestSidecarTakesNoOtherPolicysRefusalForRBACs runs the real sidecar on
// a real kube-apiserver with deploy/ applied and a Kyverno-like policy
// that refuses any label change, "labels cannot be changed". While
// netready's policies are in force, the sidecar proves its scope whoever
// is named first. Once netready-sidecar-scope's binding is deleted, the
// label probe is still refused, by that policy alone: the sidecar must
// not take its "cannot" for RBAC's refusal (v0.5 did, and wrote
// unscoped), but hold every write, naming the probe let through.
func TestSidecarTakesNoOtherPolicysRefusalForRBACs(t *testing.T) {
	d := kube.NewScopedDeploy(t)
	a := d.A
	labels := func() error {
		return d.PatchStatus(d.Self, types.MergePatchType, []byte(`{"metadata":{"labels":{"netready.io/probe":"`+time.Now().Format("150405.000000000")+`"}}}`))
	}
	otherPolicy(t, d, "kyverno-labels-immutable", podUpdates,
		"has(object.metadata.labels) == has(oldObject.metadata.labels) && (!has(object.metadata.labels) || object.metadata.labels == oldObject.metadata.labels)",
		"labels cannot be changed", nil, func() error { return adminPatch(d, "labels") })
	kubeconfig := a.Kubeconfig("bound", a.BoundToken(t, d.Self))
	listen, logs, _ := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a",
		"--require-scope", "--scope-recheck", "2s", "--pod-namespace", d.Self.Namespace, "--pod-name", d.Self.Name, "--cni-conf-dir", "")
	if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the scoped sidecar never turned ready beside a labels policy: %s\n%s", why, logs.String())
	}
	gatedPod(t, a, "before")
	kube.WaitCondition(t, a, "before", 15*time.Second, "True while scoped", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })

	liftPodScope(t, d)
	// The re-check every 2 s, then its backoff: held within a bound.
	if why := kube.SidecarReadyz(listen, 20*time.Second, http.StatusServiceUnavailable); why != "" {
		t.Fatalf("/readyz 20 s after netready-sidecar-scope was lifted = %s, want 503: the labels policy's refusal was taken for RBAC's\n%s", why, logs.String())
	}
	_, why := readyz(t, listen)
	for _, want := range []string{"not in force", "an annotation on its own pod through pods/status (policy netready-sidecar-scope)"} {
		if !strings.Contains(why, want) {
			t.Errorf("/readyz while held = %q, want it to name %q", why, want)
		}
	}
	gatedPod(t, a, "after")
	time.Sleep(3 * time.Second)
	if _, c := a.Condition("after"); c != nil {
		t.Errorf("the sidecar wrote %+v while netready-sidecar-scope was lifted", c)
	}
	if err := labels(); err == nil || !strings.Contains(err.Error(), "labels cannot be changed") {
		t.Errorf("a label change by the sidecar's identity = %v, want the labels policy's refusal: the test proves nothing", err)
	}
}

// TestSidecarWritesWithinTheBoundWhenAnotherPolicyHidesItsScope runs the
// real sidecar on a real kube-apiserver with deploy/ applied, a policy
// that freezes every pod in kube-system, the sidecar's own included, so
// that each of its pods/status probes is refused by that policy, and
// netready-sidecar-scope's binding deleted, so that no order of the
// policies names netready's: whether its scope holds cannot be told. The
// same for Nodes (a policy freezing them, netready-sidecar-node-scope's
// binding deleted), so that every Node probe reaches admission on a real
// API server (none is refused as invalid before it); and one freezing
// kube-system's Events, so that whichever policy is named first,
// netready-sidecar-events is proved.
// The sidecar holds every write for --scope-unknown-hold, /readyz
// naming the other policy, then writes: a gated pod gets its condition
// within the bound, /readyz says why (200), and one Warning Event on its
// Node names the policy.
func TestSidecarWritesWithinTheBoundWhenAnotherPolicyHidesItsScope(t *testing.T) {
	d := kube.NewScopedDeploy(t)
	a := d.A
	liftPodScope(t, d)
	lift(t, d, "netready-sidecar-node-scope", func() error {
		_, err := d.Sidecar.CoreV1().Nodes().Patch(context.Background(), "node-a", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"netready.io/unscoped":"`+time.Now().Format(time.RFC3339Nano)+`"}}}`), metav1.PatchOptions{})
		return err
	})
	allowScopeUnknownEvents(t, a)
	// Pods and Events in kube-system, where the sidecar's own pod is:
	// every pod probe, and two of the three Event probes.
	otherPolicy(t, d, "acme-kube-system-frozen",
		[]admissionv1.NamedRuleWithOperations{podUpdates[0], rule("events.k8s.io", []string{"events"}, admissionv1.Create)},
		"false", "kube-system cannot be changed",
		&metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}},
		func() error { return adminPatch(d, "annotations") })
	// Every Node probe. The sidecar makes no Node write of its own here.
	otherPolicy(t, d, "acme-nodes-frozen", []admissionv1.NamedRuleWithOperations{rule("", []string{"nodes", "nodes/status"}, admissionv1.Update)},
		"false", "nodes cannot be changed", nil,
		func() error {
			_, err := d.A.Admin.CoreV1().Nodes().Patch(context.Background(), "node-a", types.MergePatchType, []byte(`{"metadata":{"annotations":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		})
	gatedPod(t, a, "gated")
	kubeconfig := a.Kubeconfig("bound", a.BoundToken(t, d.Self))
	const hold = 8 * time.Second
	start := time.Now()
	listen, logs, _ := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a",
		"--require-scope", "--scope-unknown-hold", hold.String(), "--pod-namespace", d.Self.Namespace, "--pod-name", d.Self.Name, "--cni-conf-dir", "")

	if why := kube.SidecarReadyz(listen, 5*time.Second, http.StatusServiceUnavailable); why != "" {
		t.Fatalf("/readyz within the hold = %s, want 503\n%s", why, logs.String())
	}
	// The first check follows the first list of the scope's watch: until
	// it has reported, /readyz waits on the pod cache.
	code, why := readyz(t, listen)
	for !strings.Contains(why, "cannot be told") && time.Since(start) < hold {
		time.Sleep(100 * time.Millisecond)
		code, why = readyz(t, listen)
	}
	if time.Since(start) < hold {
		for _, want := range []string{"cannot be told", "policy netready-sidecar-scope (", "ValidatingAdmissionPolicy 'acme-kube-system-frozen'",
			"policy netready-sidecar-node-scope (", "ValidatingAdmissionPolicy 'acme-nodes-frozen'", "Holding every write until"} {
			if !strings.Contains(why, want) {
				t.Errorf("/readyz within the hold = %d %q, want it to name %q", code, why, want)
			}
		}
		if _, c := a.Condition("gated"); c != nil {
			t.Errorf("the sidecar wrote %+v within the hold", c)
		}
	}

	kube.WaitCondition(t, a, "gated", hold+20*time.Second, "True once the hold is over", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })
	if waited := time.Since(start); waited < hold {
		t.Errorf("the condition was written %v after start, within the hold of %v", waited, hold)
	}
	if why := kube.SidecarReadyz(listen, 10*time.Second, http.StatusOK); why != "" {
		t.Fatalf("/readyz once writing = %s, want 200", why)
	}
	if _, why := readyz(t, listen); !strings.Contains(why, "ValidatingAdmissionPolicy 'acme-kube-system-frozen'") {
		t.Errorf("/readyz once writing = %q, want it to name the other policy", why)
	}
	var warnings []string
	for start := time.Now(); time.Since(start) < 15*time.Second && len(warnings) == 0; time.Sleep(200 * time.Millisecond) {
		list, err := a.Admin.EventsV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		warnings = warnings[:0]
		for _, e := range list.Items {
			if e.Regarding.Kind == "Node" && e.Regarding.Name == "node-a" && e.Reason == "NetreadyScopeUnknown" {
				warnings = append(warnings, e.Type+" "+e.Note)
			}
		}
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "Warning ") || !strings.Contains(warnings[0], "ValidatingAdmissionPolicy 'acme-kube-system-frozen'") {
		t.Errorf("Node Events NetreadyScopeUnknown = %q, want one Warning naming the other policy\n%s", warnings, logs.String())
	}
}

// allowScopeUnknownEvents checks that deploy/'s netready-sidecar-events
// lets the sidecar record NetreadyScopeUnknown about its own Node: without
// it the policy refuses the very Warning that says the scope is unknown.
func allowScopeUnknownEvents(t *testing.T, a *kube.APIServer) {
	t.Helper()
	p, err := a.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(context.Background(), "netready-sidecar-events", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range p.Spec.Variables {
		if v.Name == "aboutOwnNode" && strings.Contains(v.Expression, "'NetreadyScopeUnknown'") {
			return
		}
	}
	t.Fatalf("deploy/admission.yaml's netready-sidecar-events does not allow the Node Event NetreadyScopeUnknown")
}
