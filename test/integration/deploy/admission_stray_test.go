//go:build integration

package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
)

// ownCondition is the sidecar's condition on pod, as a strategic merge
// patch.
func ownCondition(pod *corev1.Pod, typ string) []byte {
	p, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: corev1.PodConditionType(typ), Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	return p
}

// TestStrayParamsNeverRefuseAKubelet: a ConfigMap in netready's namespace
// with the params' label but no data, or data netready cannot use, or a
// second valid one, must never make a netready policy refuse a request
// that is not the sidecar's. On the real kube-apiserver, with each in
// place, node-a's kubelet still writes pod status, Node status and
// Events (events.k8s.io and core/v1), a pod is still created in a gated
// namespace, and the sidecar stays scoped: refused, with a message naming
// the ConfigMap.
func TestStrayParamsNeverRefuseAKubelet(t *testing.T) {
	d := harness.NewScopedDeploy(t)
	a, ctx := d.A, context.Background()
	kubelet := a.Kubelet(t, "node-a")
	pod := a.Create(t, harness.PlainPod("default", "web", "node-a"))
	if err := d.PatchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType)); err != nil {
		t.Fatalf("the sidecar's own condition with the shipped params = %v, want allowed", err)
	}
	gated := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gated", Labels: map[string]string{"netready.io/readiness-gate": "enabled"}}}
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, gated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.CoreV1().ServiceAccounts("gated").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
		// refusal is what the sidecar's own condition write is refused
		// with while the stray is in place.
		refusal string
	}{
		{"an empty labelled ConfigMap", &corev1.ConfigMap{}, "name no conditionType"},
		{"values netready cannot use", &corev1.ConfigMap{
			Data: map[string]string{"serviceAccount": "", "conditionType": "not a condition type!"}}, "may only change the condition not a condition type!"},
		{"keys in binaryData only", &corev1.ConfigMap{BinaryData: map[string][]byte{"serviceAccount": []byte("netready-sidecar"), "conditionType": []byte("x")}}, "name no conditionType"},
		{"a second valid one with another type", &corev1.ConfigMap{
			Data: map[string]string{"serviceAccount": "netready-sidecar", "conditionType": "example.com/other"}},
			"must name the same conditionType"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := tc.cm
			cm.Name, cm.Namespace = "stray", "kube-system"
			cm.Labels = map[string]string{"netready.io/params": "settings"}
			if _, err := a.Admin.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer func() {
				a.Admin.CoreV1().ConfigMaps("kube-system").Delete(ctx, "stray", metav1.DeleteOptions{})
				// Back to the shipped params alone before the next case.
				for start := time.Now(); d.PatchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType)) != nil; time.Sleep(200 * time.Millisecond) {
					if time.Since(start) > 30*time.Second {
						t.Fatal("the sidecar's own condition is still refused 30 s after the stray params went")
					}
				}
			}()
			// The policies see the stray through an informer: wait until
			// the sidecar's own write is refused because of it.
			var err error
			for start := time.Now(); err == nil; time.Sleep(200 * time.Millisecond) {
				err = d.PatchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType))
				if err == nil && time.Since(start) > 30*time.Second {
					t.Fatalf("the sidecar's own condition with the stray params = %v, want refused with %q (fail closed)", err, tc.refusal)
				}
			}
			if !strings.Contains(err.Error(), tc.refusal) || !strings.Contains(err.Error(), "kube-system/stray") {
				t.Errorf("the sidecar's own condition with the stray params = %v, want refused with %q, naming the ConfigMap kube-system/stray", err, tc.refusal)
			}

			n := time.Now().UTC().Format(time.RFC3339)
			writes := []struct {
				what string
				do   func() error
			}{
				{"pod status", func() error {
					_, err := kubelet.CoreV1().Pods("default").Patch(ctx, pod.Name, types.StrategicMergePatchType,
						[]byte(`{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"False","lastTransitionTime":"`+n+`"}]}}`), metav1.PatchOptions{}, "status")
					return err
				}},
				{"Node status", func() error {
					_, err := kubelet.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType,
						[]byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ok","lastHeartbeatTime":"`+n+`","lastTransitionTime":"`+n+`"}]}}`), metav1.PatchOptions{}, "status")
					return err
				}},
				{"an events.k8s.io Event", func() error {
					_, err := kubelet.EventsV1().Events("default").Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-"},
						EventTime: metav1.NowMicro(), ReportingController: "kubelet", ReportingInstance: "node-a", Action: "Pull", Reason: "Pulled", Type: corev1.EventTypeNormal,
						Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: pod.Name, UID: pod.UID}}, metav1.CreateOptions{})
					return err
				}},
				{"a core/v1 Event", func() error {
					_, err := kubelet.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "kubelet-"},
						InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: pod.Name, UID: pod.UID},
						Reason:         "Started", Message: "started", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "kubelet", Host: "node-a"},
						FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}, metav1.CreateOptions{})
					return err
				}},
				{"a pod in a gated namespace", func() error {
					_, err := a.Admin.CoreV1().Pods("gated").Create(ctx, harness.PlainPod("gated", "app", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					return err
				}},
			}
			for _, w := range writes {
				if err := w.do(); err != nil {
					t.Errorf("%s with the stray params = %v, want allowed", w.what, err)
				}
			}
			// The sidecar stays scoped.
			if err := d.PatchStatus(pod, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)); err == nil {
				t.Error("the sidecar changed a label through pods/status with the stray params in place")
			}
			if _, err := d.Sidecar.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err == nil {
				t.Error("the sidecar labelled another Node with the stray params in place")
			}
		})
	}
}
