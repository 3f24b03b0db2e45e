package nodewriter

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/netready/netready/pkg/health"
	"github.com/netready/netready/pkg/kubeapi/kubeapitest"
)

func TestSpecPatch(t *testing.T) {
	other := corev1.Taint{Key: "example.com/gpu", Value: "a100", Effect: corev1.TaintEffectNoSchedule}
	ours := corev1.Taint{Key: Key, Effect: corev1.TaintEffectNoSchedule}
	tests := []struct {
		name   string
		taints []corev1.Taint
		want   bool
		patch  string // "" for no patch
	}{
		{"add beside another taint", []corev1.Taint{other}, true,
			`{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"example.com/gpu","value":"a100","effect":"NoSchedule"},{"key":"netready.io/pod-ips-exhausted","effect":"NoSchedule"}]}}`},
		{"already there", []corev1.Taint{other, ours}, true, ""},
		{"remove keeps the other", []corev1.Taint{ours, other}, false,
			`{"metadata":{"resourceVersion":"7"},"spec":{"taints":[{"key":"example.com/gpu","value":"a100","effect":"NoSchedule"}]}}`},
		{"remove the only one: an empty list, not null", []corev1.Taint{ours}, false,
			`{"metadata":{"resourceVersion":"7"},"spec":{"taints":[]}}`},
		{"nothing to remove", nil, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "7"}, Spec: corev1.NodeSpec{Taints: tt.taints}}
			if diff := cmp.Diff(tt.patch, string(SpecPatch(node, tt.want))); diff != "" {
				t.Errorf("SpecPatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusPatch(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	shown := corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionFalse, Reason: ReasonAvailable, Message: "podnet: 3 of 13 addresses in use", LastTransitionTime: then}
	tests := []struct {
		name       string
		conds      []corev1.NodeCondition
		want       corev1.NodeCondition
		messageToo bool
		patched    bool
		transition metav1.Time
	}{
		{"first time", nil, Condition(true, "m"), false, true, metav1.NewTime(now)},
		{"flip keeps nothing old", []corev1.NodeCondition{shown}, Condition(true, "m"), false, true, metav1.NewTime(now)},
		{"same status, new counts, not worth a write", []corev1.NodeCondition{shown}, Condition(false, "podnet: 4 of 13 addresses in use"), false, false, metav1.Time{}},
		{"same status, new counts, on a full round", []corev1.NodeCondition{shown}, Condition(false, "podnet: 4 of 13 addresses in use"), true, true, then},
		{"nothing new", []corev1.NodeCondition{shown}, Condition(false, shown.Message), true, false, metav1.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := &corev1.Node{Status: corev1.NodeStatus{Conditions: tt.conds}}
			p := StatusPatch(node, tt.want, now, tt.messageToo)
			if (p != nil) != tt.patched {
				t.Fatalf("StatusPatch = %s, want a patch: %v", p, tt.patched)
			}
			if p == nil {
				return
			}
			var got struct {
				Status struct{ Conditions []corev1.NodeCondition }
			}
			json.Unmarshal(p, &got)
			if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != ConditionType {
				t.Fatalf("patch %s sends other conditions", p)
			}
			if c := got.Status.Conditions[0]; !c.LastTransitionTime.Equal(&tt.transition) || c.Message != tt.want.Message {
				t.Errorf("condition %+v, want transition %v", c, tt.transition)
			}
		})
	}
}

// TestUninstallLiftsTaintAndCondition: --uninstall takes the taint and the
// condition off, keeps other taints and conditions, and /readyz waits
// for it.
func TestUninstallLiftsTaintAndCondition(t *testing.T) {
	const node = "n1"
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}
	client := fake.NewClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: node},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{other, {Key: Key, Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			Condition(true, "podnet: 13 of 13 addresses in use"),
		}},
	})
	h := health.New()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	LiftAll(ctx, kubeapitest.Fake{C: client}, node, slog.New(slog.NewTextHandler(io.Discard, nil)), h)
	n, _ := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if diff := cmp.Diff([]corev1.Taint{other}, n.Spec.Taints); diff != "" {
		t.Errorf("taints (-want +got):\n%s", diff)
	}
	var types []corev1.NodeConditionType
	for _, c := range n.Status.Conditions {
		types = append(types, c.Type)
	}
	if diff := cmp.Diff([]corev1.NodeConditionType{corev1.NodeReady}, types); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if why := h.UnreadyReason(); why != "" {
		t.Errorf("/readyz still waits: %s", why)
	}
}
