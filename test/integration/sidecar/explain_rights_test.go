//go:build integration

package sidecar

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/publish"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// TestKubectlNetreadyWithOneNamespacesRights: a developer whose Role lets them
// read pods in their own namespace alone runs the real kubectl-netready
// against a real API server: their network-ready pod is explained (exit
// 0), and each read RBAC refused is named with what the report lacks. An
// operator sees the same pod's node and netready pod, and, for a gated pod
// on a Windows node, that no sidecar runs there to publish its gate.
func TestKubectlNetreadyWithOneNamespacesRights(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	const ns = "team"
	for _, n := range []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{corev1.LabelOSStable: "linux"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "win-1", Labels: map[string]string{corev1.LabelOSStable: "windows"}}},
	} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"netready.io/readiness-gate": "enabled"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager: pods need their service account to exist.
	if _, err := a.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "pods/log"}, Verbs: []string{"get", "list", "watch"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "developer"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "developer"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "dev"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "netready-n1", Labels: map[string]string{"app": "netready"}},
		Spec: corev1.PodSpec{NodeName: "n1", ServiceAccountName: "netready-sidecar",
			Containers: []corev1.Container{{Name: "sidecar", Image: "ghcr.io/netready/netready:v0.0.0-test"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gated := func(name, node string) *corev1.Pod {
		p, err := a.Admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: node, ReadinessGates: []corev1.PodReadinessGate{{ConditionType: publish.DefaultConditionType}},
				Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	web := gated("web", "n1")
	web.Status.Conditions = []corev1.PodCondition{{Type: publish.DefaultConditionType, Status: corev1.ConditionTrue,
		Reason: publish.ReasonProgrammed, Message: "network podnet (eth0) programmed after 212 ms", LastTransitionTime: metav1.NewTime(time.Now())}}
	if _, err := a.Admin.CoreV1().Pods(ns).UpdateStatus(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	gated("win", "win-1")

	kc := a.Kubeconfig("admin", kube.AdminToken)
	explain := func(as []string, pod string, wantCode int, want, unwanted []string) {
		t.Helper()
		args := append(append([]string{"--kubeconfig", kc}, as...), "explain", "-n", ns, pod)
		out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), args...).CombinedOutput()
		if code := exitCode(err); code != wantCode {
			t.Errorf("kubectl-netready %s: exit %d, want %d:\n%s", strings.Join(args[2:], " "), code, wantCode, out)
		}
		for _, w := range want {
			if !strings.Contains(string(out), w) {
				t.Errorf("kubectl-netready %s lacks %q:\n%s", strings.Join(args[2:], " "), w, out)
			}
		}
		for _, u := range unwanted {
			if strings.Contains(string(out), u) {
				t.Errorf("kubectl-netready %s says %q:\n%s", strings.Join(args[2:], " "), u, out)
			}
		}
	}
	dev := []string{"--as", "dev", "--as-group", "system:authenticated"}
	explain(dev, "web", 0, []string{
		"pod team/web on node n1 is network-ready\n",
		"network podnet (eth0): programmed 212 ms after ADD began",
		"not read:    could not read netready's DaemonSet or netready-settings in kube-system (forbidden): condition type assumed " + publish.DefaultConditionType,
		"not read:    could not read namespace team (forbidden)",
		"not read:    could not list Events in team (forbidden)",
		"not read:    could not read node n1 (forbidden): its runtime network, taint, pools and netready pod are not shown",
	}, nil)
	explain(dev, "win", 1, []string{"pod team/win on node win-1 has no netready condition yet", "not read:    could not read node win-1 (forbidden)"},
		[]string{"no sidecar:"})
	explain(nil, "web", 0, []string{
		"gate:        " + publish.DefaultConditionType + ": added by the admission policy netready-readiness-gate: namespace team is labelled",
		"node:        n1: runtime network ready",
		"netready:    pod netready-n1 (v0.0.0-test), Pending, not ready",
	}, []string{"not read:", "no sidecar:"})
	explain(nil, "win", 1, []string{
		"no sidecar:  no netready sidecar runs on node win-1 (a Windows node: netready's DaemonSet runs on Linux nodes only): nothing will publish this gate",
		"netready:    no netready pod on win-1",
	}, []string{"not read:"})
}
