package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/explain"
	"github.com/netready/netready/pkg/offswitch"
)

// TestOffAndOnAreIdempotent: off creates the ConfigMap and adds the
// policy's matchCondition, once however often it runs; on undoes both,
// keeping the policy's other conditions; a cluster without the policy is
// told so, not failed.
func TestOffAndOnAreIdempotent(t *testing.T) {
	ctx := context.Background()
	policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: explain.DefaultPolicy, ResourceVersion: "1"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{MatchConditions: []admissionv1.MatchCondition{{Name: "not-host-network", Expression: "true"}}}}
	c := fake.NewClientset(policy)
	conditions := func() []string {
		p, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, explain.DefaultPolicy, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range p.Spec.MatchConditions {
			names = append(names, m.Name+"="+m.Expression)
		}
		return names
	}
	for i := range 2 {
		var out bytes.Buffer
		if err := turn(ctx, &out, c, "kube-system", explain.DefaultPolicy, true); err != nil {
			t.Fatalf("off #%d: %v", i+1, err)
		}
		if _, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, offswitch.ConfigMapName, metav1.GetOptions{}); err != nil {
			t.Errorf("off #%d: ConfigMap: %v", i+1, err)
		}
		if got, want := strings.Join(conditions(), " "), "not-host-network=true netready-off=false"; got != want {
			t.Errorf("off #%d: matchConditions %q, want %q", i+1, got, want)
		}
		if !strings.Contains(out.String(), "netready is off: within 30 s") {
			t.Errorf("off #%d said %q", i+1, out.String())
		}
	}
	for i := range 2 {
		var out bytes.Buffer
		if err := turn(ctx, &out, c, "kube-system", explain.DefaultPolicy, false); err != nil {
			t.Fatalf("on #%d: %v", i+1, err)
		}
		if _, err := c.CoreV1().ConfigMaps("kube-system").Get(ctx, offswitch.ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("on #%d: ConfigMap still there (%v)", i+1, err)
		}
		if got, want := strings.Join(conditions(), " "), "not-host-network=true"; got != want {
			t.Errorf("on #%d: matchConditions %q, want %q", i+1, got, want)
		}
	}
	var out bytes.Buffer
	if err := turn(ctx, &out, fake.NewClientset(), "kube-system", explain.DefaultPolicy, true); err != nil || !strings.Contains(out.String(), "not found") {
		t.Errorf("off without the policy: %v, said %q", err, out.String())
	}
}

// TestOffFindsAPrefixedPolicy: without --policy, off and on turn the one
// policy whose name holds netready-readiness-gate, as a kustomize
// namePrefix and nameSuffix leave it; with two such, they name both and
// change nothing. Where no netready DaemonSet runs in the namespace, off
// says the sidecars would not see the ConfigMap there.
func TestOffFindsAPrefixedPolicy(t *testing.T) {
	ctx := context.Background()
	const prefixed = "acme-netready-readiness-gate-x"
	policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: prefixed, ResourceVersion: "1"}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "netready-system", Name: "acme-netready-x", Labels: map[string]string{"app": "netready"}}}
	c := fake.NewClientset(policy, ds)
	for _, off := range []bool{true, false} {
		var out bytes.Buffer
		if err := turn(ctx, &out, c, "netready-system", "", off); err != nil {
			t.Fatalf("turn(%v): %v", off, err)
		}
		p, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, prefixed, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(p.Spec.MatchConditions) == 1; got != off {
			t.Errorf("turn(%v): %s's matchConditions %+v\nsaid: %s", off, prefixed, p.Spec.MatchConditions, out.String())
		}
		if !strings.Contains(out.String(), "MutatingAdmissionPolicy "+prefixed+": matchCondition netready-off") || strings.Contains(out.String(), "warning:") {
			t.Errorf("turn(%v) said:\n%s", off, out.String())
		}
	}

	var out bytes.Buffer
	if err := turn(ctx, &out, c, "kube-system", "", true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "warning: no netready DaemonSet (label app=netready) in namespace kube-system: ") ||
		!strings.Contains(out.String(), "--netready-namespace") {
		t.Errorf("off in a namespace without netready said:\n%s", out.String())
	}

	two := fake.NewClientset(&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "a-" + explain.DefaultPolicy}},
		&admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-" + explain.DefaultPolicy}})
	if err := turn(ctx, &bytes.Buffer{}, two, "kube-system", "", true); err == nil || !strings.Contains(err.Error(), "name one with --policy") {
		t.Errorf("off with two candidate policies: %v, want a refusal naming --policy", err)
	}
	if _, err := two.CoreV1().ConfigMaps("kube-system").Get(ctx, offswitch.ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("off with two candidate policies created the ConfigMap (%v)", err)
	}
	for _, name := range []string{"a-", "b-"} {
		if p, _ := two.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, name+explain.DefaultPolicy, metav1.GetOptions{}); len(p.Spec.MatchConditions) != 0 {
			t.Errorf("off with two candidates changed %s", p.Name)
		}
	}
}
