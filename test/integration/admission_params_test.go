//go:build integration

package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/pkg/publish"
)

// scopedDeploy is deploy/ applied on a real API server, with node-a and
// node-b, the sidecar's pod on node-a and a client holding its pod-bound
// token, once the scope policy refuses it a label change.
type scopedDeploy struct {
	a       *apiServer
	self    *corev1.Pod
	sidecar kubernetes.Interface
}

func newScopedDeploy(t *testing.T) *scopedDeploy {
	t.Helper()
	a := startAPIServer(t)
	ctx := context.Background()
	a.kubectl(t, "apply", "-k", "../../deploy", "--server-side")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	self := plainPod("kube-system", "netready-abcde", "node-a")
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.create(t, self)
	d := &scopedDeploy{a: a, self: self, sidecar: kubernetes.NewForConfigOrDie(a.config(a.boundToken(t, self)))}
	// A new value each time: a label already set is no change.
	label := func() []byte {
		return []byte(`{"metadata":{"labels":{"netready.io/probe":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}}}`)
	}
	for start := time.Now(); d.patchStatus(self, types.MergePatchType, label()) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the scope policy never took effect")
		}
	}
	return d
}

func (d *scopedDeploy) patchStatus(pod *corev1.Pod, pt types.PatchType, body []byte) error {
	_, err := d.sidecar.CoreV1().Pods(pod.Namespace).Patch(context.Background(), pod.Name, pt, body, metav1.PatchOptions{}, "status")
	return err
}

// ownCondition is the sidecar's condition on pod, as a strategic merge
// patch.
func ownCondition(pod *corev1.Pod, typ string) []byte {
	p, _ := publish.Patch(pod.UID, corev1.PodCondition{Type: corev1.PodConditionType(typ), Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, LastTransitionTime: metav1.Now()})
	return p
}

// kubelet returns a client acting as node's kubelet (user
// system:node:<node>, group system:nodes), by impersonation, with the
// rights of the system:node ClusterRole.
func (a *apiServer) kubelet(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	_, err := a.Admin.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	cfg := a.config(adminToken)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
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
	d := newScopedDeploy(t)
	a, ctx := d.a, context.Background()
	kubelet := a.kubelet(t, "node-a")
	pod := a.create(t, plainPod("default", "web", "node-a"))
	if err := d.patchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType)); err != nil {
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
				for start := time.Now(); d.patchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType)) != nil; time.Sleep(200 * time.Millisecond) {
					if time.Since(start) > 30*time.Second {
						t.Fatal("the sidecar's own condition is still refused 30 s after the stray params went")
					}
				}
			}()
			// The policies see the stray through an informer: wait until
			// the sidecar's own write is refused because of it.
			var err error
			for start := time.Now(); err == nil; time.Sleep(200 * time.Millisecond) {
				err = d.patchStatus(pod, types.StrategicMergePatchType, ownCondition(pod, publish.DefaultConditionType))
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
					_, err := a.Admin.CoreV1().Pods("gated").Create(ctx, plainPod("gated", "app", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
					return err
				}},
			}
			for _, w := range writes {
				if err := w.do(); err != nil {
					t.Errorf("%s with the stray params = %v, want allowed", w.what, err)
				}
			}
			// The sidecar stays scoped.
			if err := d.patchStatus(pod, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`)); err == nil {
				t.Error("the sidecar changed a label through pods/status with the stray params in place")
			}
			if _, err := d.sidecar.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err == nil {
				t.Error("the sidecar labelled another Node with the stray params in place")
			}
		})
	}
}
