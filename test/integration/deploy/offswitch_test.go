//go:build integration

package deploy

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netready/netready/pkg/offswitch"
	"github.com/netready/netready/test/harness"
	"github.com/netready/netready/test/harness/kube"
)

// kubectlNetready runs the real kubectl-netready as the admin against a,
// and returns what it printed and its exit status.
func kubectlNetready(t *testing.T, a *kube.APIServer, args ...string) (string, int) {
	t.Helper()
	all := append([]string{"--kubeconfig", a.Kubeconfig("admin", kube.AdminToken)}, args...)
	out, err := exec.Command(filepath.Join(harness.BinDir, "kubectl-netready"), all...).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("kubectl-netready: %v", err)
	}
	t.Logf("kubectl-netready %s (exit %d):\n%s", strings.Join(args, " "), code, out)
	return string(out), code
}

// policyOff says whether the mutating policy name holds the off
// matchCondition.
func policyOff(t *testing.T, a *kube.APIServer, name string) bool {
	t.Helper()
	p, err := a.Admin.AdmissionregistrationV1().MutatingAdmissionPolicies().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(p.Spec.MatchConditions, func(m admissionv1.MatchCondition) bool { return m.Name == offswitch.MatchCondition })
}

// TestOffSwitchUnderANamePrefix: deploy/ under an overlay that renames
// everything (acme-, -x) and moves it to netready-system, on a real API
// server. kubectl netready off with --netready-namespace and no --policy
// finds the renamed policy, so no new pod gets the gate; the real
// sidecar, with the overlay's RBAC and its bound token, notes the switch
// for the plugin; status says netready is off; without the namespace,
// off warns that no netready runs where it wrote. on undoes it all.
func TestOffSwitchUnderANamePrefix(t *testing.T) {
	const ns, sa, policy = "netready-system", "acme-netready-sidecar-x", "acme-netready-readiness-gate-x"
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	a.CreateNamespaces(t, ns)
	a.Kubectl(t, "apply", "-k", overlayOf(t, "namePrefix: acme-\nnameSuffix: -x\nnamespace: "+ns+"\n"), "--server-side")
	if _, err := a.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gates := func() (int, error) {
		p, err := a.Admin.CoreV1().Pods("gated").Create(ctx, kube.PlainPod("gated", "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return 0, err
		}
		return len(p.Spec.ReadinessGates), nil
	}
	harness.Within(t, "the renamed policy gating new pods", 30*time.Second, func() bool { g, err := gates(); return err == nil && g == 1 })

	self := kube.PlainPod(ns, "acme-netready-x-abcde", "node-a")
	self.Spec.ServiceAccountName = sa
	self = a.Create(t, self)
	stateDir := t.TempDir()
	listen, logs, stop := kube.RunSidecar(t, a.Kubeconfig("acme-sidecar", a.BoundToken(t, self)), stateDir, "node-a",
		"--require-scope", "--pod-namespace", ns, "--pod-name", self.Name, "--cni-conf-dir", "")
	defer stop()
	if why := kube.SidecarReadyz(listen, 60*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the renamed sidecar never turned ready: %s\n%s", why, logs.String())
	}

	out, code := kubectlNetready(t, a, "off", "--netready-namespace", ns)
	if code != 0 || !strings.Contains(out, "MutatingAdmissionPolicy "+policy+": matchCondition "+offswitch.MatchCondition+" added") ||
		!strings.Contains(out, "ConfigMap "+ns+"/"+offswitch.ConfigMapName+" created") || strings.Contains(out, "warning:") {
		t.Fatalf("kubectl netready off --netready-namespace %s: exit %d, want 0, the renamed policy turned and the ConfigMap created, no warning", ns, code)
	}
	harness.Within(t, "no gate on a new pod while off", 30*time.Second, func() bool { g, err := gates(); return err == nil && g == 0 })
	harness.Within(t, "the renamed sidecar's off note", 30*time.Second, func() bool { return offswitch.Noted(stateDir) })
	out, code = kubectlNetready(t, a, "status", "--netready-namespace", ns)
	if first := strings.SplitN(out, "\n", 2)[0]; code == 2 || !strings.HasPrefix(first, "netready is OFF since ") ||
		!strings.Contains(first, "by kubectl-netready (ConfigMap "+ns+"/"+offswitch.ConfigMapName+")") || strings.Contains(first, "still adds gates") {
		t.Errorf("status --netready-namespace %s while off: exit %d, first line %q", ns, code, first)
	}

	out, code = kubectlNetready(t, a, "on", "--netready-namespace", ns)
	if code != 0 || !strings.Contains(out, "matchCondition "+offswitch.MatchCondition+" removed") {
		t.Fatalf("kubectl netready on --netready-namespace %s: exit %d, want 0 and the matchCondition removed", ns, code)
	}
	if policyOff(t, a, policy) {
		t.Errorf("%s keeps matchCondition %s after on", policy, offswitch.MatchCondition)
	}
	harness.Within(t, "the off note removed once on", 30*time.Second, func() bool { return !offswitch.Noted(stateDir) })
	harness.Within(t, "a gate on a new pod once on", 30*time.Second, func() bool { g, err := gates(); return err == nil && g == 1 })

	// Without the namespace: the ConfigMap lands in kube-system, where no
	// sidecar looks, and off says so.
	out, code = kubectlNetready(t, a, "off")
	if code != 0 || !strings.Contains(out, "warning: no netready DaemonSet (label app=netready) in namespace kube-system") {
		t.Errorf("off without --netready-namespace: exit %d, want 0 and a warning that netready does not run in kube-system", code)
	}
	if _, code := kubectlNetready(t, a, "on"); code != 0 || policyOff(t, a, policy) {
		t.Errorf("on (kube-system): exit %d, the policy's matchCondition left %v", code, policyOff(t, a, policy))
	}
}

// runbookRBAC is the YAML block of docs/runbook.md's "Who may switch it".
func runbookRBAC(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../../../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "**Who may switch it.**")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/runbook.md has no yaml block under **Who may switch it.**")
	}
	return block
}

// TestOffSwitchTakesTheRightsTheRunbookNames: on a real API server with
// deploy/ applied, a member of netready-oncall, bound by the runbook's
// RBAC as it stands, switches netready off and on with the real
// kubectl-netready; a tenant with edit in their own namespace is refused
// and changes nothing; kubectl auth can-i answers as the runbook says.
func TestOffSwitchTakesTheRightsTheRunbookNames(t *testing.T) {
	a := kube.StartAPIServer(t)
	ctx := context.Background()
	a.Kubectl(t, "apply", "-k", "../../../deploy", "--server-side")
	rbac := filepath.Join(t.TempDir(), "oncall.yaml")
	if err := os.WriteFile(rbac, []byte(runbookRBAC(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Kubectl(t, "apply", "-f", rbac)
	if _, err := a.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Admin.RbacV1().RoleBindings("team").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant-edit"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "edit"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "tenant"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	oncall := []string{"--as", "alice", "--as-group", "netready-oncall"}
	tenant := []string{"--as", "tenant"}
	// RBAC's authorizer learns bindings through an informer.
	harness.Within(t, "the runbook's binding in force", 30*time.Second, func() bool {
		out, _ := a.KubectlRun(append([]string{"auth", "can-i", "create", "configmaps", "-n", "kube-system"}, oncall...)...)
		return strings.TrimSpace(out) == "yes"
	})
	if out, _ := a.KubectlRun(append([]string{"auth", "can-i", "create", "configmaps", "-n", "kube-system"}, tenant...)...); strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i create configmaps -n kube-system as a tenant with edit in team = %q, want no", out)
	}

	out, code := kubectlNetready(t, a, append(tenant, "off")...)
	if code != 2 || !strings.Contains(out, "forbidden") {
		t.Errorf("off as a tenant: exit %d, want 2, refused", code)
	}
	if _, err := a.Admin.CoreV1().ConfigMaps("kube-system").Get(ctx, offswitch.ConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a tenant's off, ConfigMap %s: %v, want none", offswitch.ConfigMapName, err)
	}
	if policyOff(t, a, "netready-readiness-gate") {
		t.Error("a tenant's off turned the policy")
	}

	out, code = kubectlNetready(t, a, append(oncall, "off")...)
	if code != 0 || !strings.Contains(out, "ConfigMap kube-system/"+offswitch.ConfigMapName+" created") ||
		!strings.Contains(out, "matchCondition "+offswitch.MatchCondition+" added") || strings.Contains(out, "warning:") {
		t.Fatalf("off as netready-oncall: exit %d, want 0, the ConfigMap and the policy turned, no warning", code)
	}
	if !policyOff(t, a, "netready-readiness-gate") {
		t.Error("off as netready-oncall left the policy on")
	}
	if _, code := kubectlNetready(t, a, append(oncall, "off")...); code != 0 {
		t.Errorf("off again as netready-oncall: exit %d, want 0 (idempotent)", code)
	}
	out, code = kubectlNetready(t, a, append(oncall, "on")...)
	if code != 0 || !strings.Contains(out, "ConfigMap kube-system/"+offswitch.ConfigMapName+" deleted") {
		t.Fatalf("on as netready-oncall: exit %d, want 0 and the ConfigMap deleted", code)
	}
	if policyOff(t, a, "netready-readiness-gate") {
		t.Error("on as netready-oncall left the matchCondition")
	}
}
