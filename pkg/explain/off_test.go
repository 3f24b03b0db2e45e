package explain

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/pkg/publish"
)

// offConfigMap is the switch as kubectl netready off leaves it, 5 min
// ago, edited by kubectl later.
func offConfigMap() *corev1.ConfigMap {
	at := func(d time.Duration) *metav1.Time { t := metav1.NewTime(now.Add(-d)); return &t }
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: DefaultNamespace, Name: offswitch.ConfigMapName,
		CreationTimestamp: *at(5 * time.Minute),
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(time.Minute)},
			{Manager: "kubectl-netready", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(5 * time.Minute)},
		}}}
}

func gatePolicy(name string, off bool) *admissionv1.MutatingAdmissionPolicy {
	p := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{MatchConditions: []admissionv1.MatchCondition{{Name: "not-host-network", Expression: "true"}}}}
	if off {
		p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionv1.MatchCondition{Name: offswitch.MatchCondition, Expression: "false"})
	}
	return p
}

// TestOffStateSaysSinceWhenByWhatAndHowToUndo: status's line reads the
// ConfigMap (since its creation, by the field manager that created it)
// and the policy's matchCondition, also under a namePrefix, and names a
// switch half turned.
func TestOffStateSaysSinceWhenByWhatAndHowToUndo(t *testing.T) {
	const since = "netready is OFF since 2026-11-24T11:55:00Z (5m0s ago), by kubectl-netready (ConfigMap kube-system/netready-off): " +
		"each running sidecar releases its node's gated pods (True, reason NetreadyOff) and ADD waits on no check"
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		policy  string
		want    string
		wantErr string
	}{
		{name: "on", objs: []runtime.Object{gatePolicy(DefaultPolicy, false)}},
		{name: "on, no policy (before 1.36)"},
		{name: "off", objs: []runtime.Object{offConfigMap(), gatePolicy(DefaultPolicy, true)}, want: since + "; undo: kubectl netready on"},
		{name: "off, the policy found under a namePrefix", objs: []runtime.Object{offConfigMap(), gatePolicy("acme-"+DefaultPolicy+"-x", false)},
			want: since + "; the mutating policy acme-netready-readiness-gate-x still adds gates (no matchCondition netready-off), which the sidecars release; undo: kubectl netready on"},
		{name: "off, no policy", objs: []runtime.Object{offConfigMap()}, want: since + "; undo: kubectl netready on"},
		{name: "half off: the policy's condition alone", objs: []runtime.Object{gatePolicy("acme-"+DefaultPolicy, true)},
			want: "netready is HALF OFF: the mutating policy acme-netready-readiness-gate adds no gate (matchCondition netready-off), but there is no ConfigMap kube-system/netready-off: " +
				"new pods start ungated, the sidecars judge gated pods as usual; kubectl netready on (or off) makes it whole"},
		{name: "--policy names another", objs: []runtime.Object{gatePolicy("gates", true), gatePolicy(DefaultPolicy, false)}, policy: "gates",
			want: "netready is HALF OFF: the mutating policy gates adds no gate"},
		{name: "two policies could be netready's", objs: []runtime.Object{gatePolicy("a-"+DefaultPolicy, false), gatePolicy("b-"+DefaultPolicy, false)},
			wantErr: "2 MutatingAdmissionPolicies could be netready's (a-netready-readiness-gate, b-netready-readiness-gate): name one with --policy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			off, err := OffState(context.Background(), cluster(tc.objs...), Options{Policy: tc.policy, Now: func() time.Time { return now }})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := off.Line(); !strings.HasPrefix(got, tc.want) || (tc.want == "") != (got == "") {
				t.Errorf("Line() = %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestExplainSaysTheOffSwitchGaveTheTrue: a pod True with reason
// NetreadyOff is said to be released by the off switch, not by its
// network, while off and once on again.
func TestExplainSaysTheOffSwitchGaveTheTrue(t *testing.T) {
	released := gatedPod("web", "n1", &corev1.PodCondition{Type: condType, Status: corev1.ConditionTrue, Reason: publish.ReasonOff,
		Message: publish.Off(condType).Message, LastTransitionTime: metav1.NewTime(now.Add(-4 * time.Minute))})
	const summary = "pod shop/web on node n1 was released by netready's off switch, not by its network (True, reason NetreadyOff): its network was not checked"
	for _, tc := range []struct {
		name string
		objs []runtime.Object
		want []string
		not  []string
	}{
		{"while off", []runtime.Object{released, offConfigMap()}, []string{summary + "\n",
			"\n  off:         netready is OFF since 2026-11-24T11:55:00Z (5m0s ago), by kubectl-netready (ConfigMap kube-system/netready-off)"}, nil},
		{"on again", []runtime.Object{released}, []string{summary + "; netready is on again, and a True given while off stays\n"}, []string{"off:"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Pod(context.Background(), cluster(tc.objs...), "shop", "web", Options{Now: func() time.Time { return now }})
			if err != nil {
				t.Fatal(err)
			}
			if !r.NetworkReady {
				t.Error("NetworkReady = false: the condition is True, and explain's exit status follows it")
			}
			var out bytes.Buffer
			r.WriteText(&out)
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the text lacks %q:\n%s", w, out.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("the text says %q:\n%s", n, out.String())
				}
			}
			wantOff := &Off{ConfigMap: "kube-system/netready-off"}
			if len(tc.objs) > 1 {
				wantOff = &Off{On: true, ConfigMap: "kube-system/netready-off", Since: now.Add(-5 * time.Minute), Age: "5m0s", By: "kubectl-netready"}
			}
			if diff := cmp.Diff(wantOff, r.Off); diff != "" {
				t.Errorf("Off (-want +got):\n%s", diff)
			}
		})
	}
}
