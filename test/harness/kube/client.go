//go:build integration

package kube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kubeconfig writes a kubeconfig for token and returns its path.
func (a *APIServer) Kubeconfig(name, token string) string {
	path := filepath.Join(a.dir, name+".kubeconfig")
	os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:%d", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %s}}]
contexts: [{name: test, context: {cluster: test, user: u}}]
current-context: test
`, a.port, token)), 0o600)
	return path
}

// Kubectl runs the real kubectl as the admin against a.
func (a *APIServer) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := a.KubectlRun(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// KubectlRun is kubectl for a command that may fail.
func (a *APIServer) KubectlRun(args ...string) (string, error) {
	kc := a.Kubeconfig("admin", AdminToken)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(a.bins, "kubectl"), append([]string{"--kubeconfig", kc, "--cache-dir", filepath.Join(a.dir, "kubectl-cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// BoundToken mints what kubelet gives a pod: a ServiceAccount token bound
// to the pod, which carries the pod's node.
func (a *APIServer) BoundToken(t testing.TB, pod *corev1.Pod) string {
	t.Helper()
	exp := int64(3600)
	tr, err := a.Admin.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// Create creates the pod as the admin.
func (a *APIServer) Create(t *testing.T, obj *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := a.Admin.CoreV1().Pods(obj.Namespace).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// PlainPod is a pod on node without the readiness gate.
func PlainPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
}

// CreateNamespaces creates ns, and "gated", labelled for the readiness
// gate, with its default ServiceAccount (no controller-manager runs).
func (a *APIServer) CreateNamespaces(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{ns, "gated"} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if n == "gated" {
			obj.Labels = map[string]string{"netready.io/readiness-gate": "enabled"}
		}
		if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Admin.CoreV1().ServiceAccounts("gated").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
