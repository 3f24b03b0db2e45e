//go:build integration

package deploy

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness/kube"
)

// ownCondition is the sidecar's condition on pod, as a strategic merge
// patch.
func ownCondition(pod *corev1.Pod, typ string) []byte {
	p, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: corev1.PodConditionType(typ), Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	return p
}

// TestLabelledConfigMapsChangeNoPolicy: the policies have no params, so
// a ConfigMap in netready's namespace with the label v0.5's params had
// (netready.io/params=settings), whatever it holds, changes nothing. On
// the real kube-apiserver, with each in place for longer than the
// policies' informers took to see v0.5's params: the sidecar still sets
// its own condition, a pod created in a gated namespace gets exactly one
// gate, netready's; node-a's kubelet still writes pod status, Node status
// and Events (events.k8s.io and core/v1); and the sidecar stays scoped.
func TestLabelledConfigMapsChangeNoPolicy(t *testing.T) {
	d := kube.NewScopedDeploy(t)
	a, ctx := d.A, context.Background()
	kubelet := a.Kubelet(t, "node-a")
	pod := a.Create(t, kube.PlainPod("default", "web", "node-a"))
	gated := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "gated", Labels: map[string]string{"netready.io/readiness-gate": "enabled"}}}
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, gated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.CoreV1().ServiceAccounts("gated").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gates := func() ([]corev1.PodReadinessGate, error) {
		p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "app", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return nil, err
		}
		return p.Spec.ReadinessGates, nil
	}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if g, _ := gates(); len(g) > 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the mutating policy never took effect")
		}
	}

	for _, tc := range []struct {
		name string
		cm   *corev1.ConfigMap
	}{
		{"an empty labelled ConfigMap", &corev1.ConfigMap{}},
		{"values netready cannot use", &corev1.ConfigMap{Data: map[string]string{"serviceAccount": "", "conditionType": "not a condition type!"}}},
		{"keys in binaryData only", &corev1.ConfigMap{BinaryData: map[string][]byte{"serviceAccount": []byte("netready-sidecar"), "conditionType": []byte("x")}}},
		{"a second valid one with another type", &corev1.ConfigMap{Data: map[string]string{"serviceAccount": "netready-sidecar", "conditionType": "example.com/other"}}},
		{"one naming another ServiceAccount", &corev1.ConfigMap{Data: map[string]string{"serviceAccount": "default", "conditionType": "example.com/other"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cm := tc.cm
			cm.Name, cm.Namespace = "stray", "kube-system"
			cm.Labels = map[string]string{"netready.io/params": "settings"}
			if _, err := a.Admin.CoreV1().ConfigMaps("kube-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			defer a.Admin.CoreV1().ConfigMaps("kube-system").Delete(ctx, "stray", metav1.DeleteOptions{})
			// v0.5's policies saw a new params object within about a
			// second; nothing may change for five.
			for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(500 * time.Millisecond) {
				if err := d.PatchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType)); err != nil {
					t.Fatalf("the sidecar's own condition with the stray in place = %v, want allowed", err)
				}
				g, err := gates()
				if err != nil || len(g) != 1 || g[0].ConditionType != publish.DefaultConditionType {
					t.Fatalf("a pod created in a gated namespace with the stray in place: gates %v, %v; want exactly one, %s", g, err, publish.DefaultConditionType)
				}
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
			}
			for _, w := range writes {
				if err := w.do(); err != nil {
					t.Errorf("%s with the stray in place = %v, want allowed", w.what, err)
				}
			}
			// The sidecar stays scoped, to the shipped type alone.
			if err := d.PatchStatus(pod, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)); err == nil {
				t.Error("the sidecar changed a label through pods/status with the stray in place")
			}
			if err := d.PatchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, "example.com/other")); err == nil {
				t.Error("the sidecar set the stray's condition type")
			}
			if _, err := d.Sidecar.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err == nil {
				t.Error("the sidecar labelled another Node with the stray in place")
			}
		})
	}
}
