package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/offswitch"
)

// TestOffAndOnAreIdempotent: off creates the ConfigMap and adds the
// policy's matchCondition, once however often it runs; on undoes both,
// keeping the policy's other conditions; a cluster without the policy is
// told so, not failed.
func TestOffAndOnAreIdempotent(t *testing.T) {
	ctx := context.Background()
	policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: defaultPolicy, ResourceVersion: "1"},
		Spec: admissionv1.MutatingAdmissionPolicySpec{MatchConditions: []admissionv1.MatchCondition{{Name: "not-host-network", Expression: "true"}}}}
	c := fake.NewClientset(policy)
	conditions := func() []string {
		p, err := c.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(ctx, defaultPolicy, metav1.GetOptions{})
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
		if err := turn(ctx, &out, c, "kube-system", defaultPolicy, true); err != nil {
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
		if err := turn(ctx, &out, c, "kube-system", defaultPolicy, false); err != nil {
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
	if err := turn(ctx, &out, fake.NewClientset(), "kube-system", defaultPolicy, true); err != nil || !strings.Contains(out.String(), "not found") {
		t.Errorf("off without the policy: %v, said %q", err, out.String())
	}
}
