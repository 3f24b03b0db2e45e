//go:build integration

package deploy

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/cnitest"
	"github.com/netready/netready/test/harness/kube"
)

// TestDeployRunsOnAnOlderCluster runs the older-cluster path (README, Compatibility) on
// a real kube-apiserver 1.34, which has the validating admission policies
// (v1 since 1.30) and node claims in pod-bound tokens, but no v1
// MutatingAdmissionPolicy. deploy/ alone fails there, naming the kind;
// with components/no-mutating-policy `kubectl apply -k` succeeds. The
// scope policies then hold the real sidecar, run as its pod with
// --require-scope, which publishes a marker the real plugin wrote for a
// pod whose gate is written in its spec.
func TestDeployRunsOnAnOlderCluster(t *testing.T) {
	a := kube.StartAPIServerOf(t, filepath.Join("1.34", "kube-apiserver"))
	ctx := context.Background()
	if v, err := a.Admin.Discovery().ServerVersion(); err != nil || v.Major != "1" || v.Minor != "34" {
		t.Fatalf("server version %+v, %v; want 1.34 (scripts/build-k8s.sh builds it into $NETREADY_K8S_BIN/1.34)", v, err)
	}

	out, err := a.KubectlRun("apply", "-k", "../../../deploy", "--server-side", "--dry-run=server")
	if err == nil || !strings.Contains(out, "MutatingAdmissionPolicy") {
		t.Errorf("kubectl apply -k deploy/ on 1.34 = %v, want a failure naming MutatingAdmissionPolicy:\n%s", err, out)
	}
	dir := t.TempDir()
	harness.MustRun(t, "cp", "-r", "../../../deploy", dir)
	os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [deploy]\ncomponents: [deploy/components/no-mutating-policy]\n"), 0o644)
	out = a.Kubectl(t, "apply", "-k", dir, "--server-side")
	for _, want := range []string{"validatingadmissionpolicy.admissionregistration.k8s.io/netready-sidecar-scope", "daemonset.apps/netready"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl apply -k with no-mutating-policy did not apply %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mutatingadmissionpolicy") {
		t.Errorf("no-mutating-policy still applies a MutatingAdmissionPolicy:\n%s", out)
	}

	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kube.SidecarNode}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	self := kube.PlainPod("kube-system", "netready-old01", kube.SidecarNode)
	self.Spec.ServiceAccountName = "netready-sidecar"
	self = a.Create(t, self)
	token := a.BoundToken(t, self)

	n := cnitest.NewNet(t, "calico-style.conflist", func(n *cnitest.TestNet, _ map[string]any) {
		n.Netready()["timeout"] = "5s"
		n.Netready()["checks"] = []any{map[string]any{"kind": "address"}}
	})
	listen, logs, _ := kube.RunSidecar(t, a.Kubeconfig("old-sidecar", token), n.StateDir, kube.SidecarNode,
		"--require-scope", "--pod-namespace", self.Namespace, "--pod-name", self.Name, "--cni-conf-dir", "")
	if why := kube.SidecarReadyz(listen, 60*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the sidecar never found its scope in force on 1.34: %s\n%s", why, logs.String())
	}

	pod := a.NewPod("old-0", kube.SidecarNode) // the gate in its spec, as the path says
	netns := cnitest.NewNS(t)
	if _, err := n.Add(netns.Path(), "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=old-0;K8S_POD_UID="+string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	kube.WaitCondition(t, a, "old-0", 15*time.Second, "True on 1.34", func(c *corev1.PodCondition) bool { return c.Status == corev1.ConditionTrue })

	sidecar := kubernetes.NewForConfigOrDie(a.Config(token))
	_, err = sidecar.CoreV1().Pods("default").Patch(ctx, "old-0", types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"hijacked"}}}`), metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), "netready-sidecar-scope") {
		t.Errorf("a label through pods/status on 1.34 = %v, want refused by netready-sidecar-scope", err)
	}
}
