//go:build integration

package kube

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netready/netready/test/harness"
)

// ScopedDeploy is deploy/ applied on a real API server, with node-a and
// node-b, the sidecar's pod on node-a and a client holding its pod-bound
// token, once the scope policy refuses it a label change.
type ScopedDeploy struct {
	A       *APIServer
	Self    *corev1.Pod
	Sidecar kubernetes.Interface
}

// NewScopedDeploy applies deploy/ on a new API server and returns it once
// the scope policies are in force.
func NewScopedDeploy(t *testing.T) *ScopedDeploy {
	t.Helper()
	return NewScopedDeployWith(t)
}

// NewScopedDeployWith is NewScopedDeploy with apiArgs for kube-apiserver
// (an audit log, say).
func NewScopedDeployWith(t *testing.T, apiArgs ...string) *ScopedDeploy {
	t.Helper()
	a := StartAPIServer(t, apiArgs...)
	ctx := context.Background()
	a.Kubectl(t, "apply", "-k", harness.RepoPath("deploy"), "--server-side")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	self := PlainPod("kube-system", "netready-abcde", "node-a")
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.Create(t, self)
	d := &ScopedDeploy{A: a, Self: self, Sidecar: kubernetes.NewForConfigOrDie(a.Config(a.BoundToken(t, self)))}
	// A new value each time: a label already set is no change.
	label := func() []byte {
		return []byte(`{"metadata":{"labels":{"netready.io/probe":"` + strconv.FormatInt(time.Now().UnixNano(), 10) + `"}}}`)
	}
	for start := time.Now(); d.PatchStatus(self, types.MergePatchType, label()) == nil; time.Sleep(200 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatal("the scope policy never took effect")
		}
	}
	return d
}

// PatchStatus patches the pod's status as the sidecar.
func (d *ScopedDeploy) PatchStatus(pod *corev1.Pod, pt types.PatchType, body []byte) error {
	_, err := d.Sidecar.CoreV1().Pods(pod.Namespace).Patch(context.Background(), pod.Name, pt, body, metav1.PatchOptions{}, "status")
	return err
}

// Kubelet returns a client acting as node's kubelet (user
// system:node:<node>, group system:nodes), by impersonation, with the
// rights of the system:node ClusterRole.
func (a *APIServer) Kubelet(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	_, err := a.Admin.RbacV1().ClusterRoleBindings().Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kubelets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}},
	}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	cfg := a.Config(AdminToken)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
}
