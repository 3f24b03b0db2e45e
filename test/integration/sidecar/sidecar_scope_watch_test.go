//go:build integration

package sidecar

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/netready/netready/test/harness/kube"
)

// apiRequests sums the API server's apiserver_request_total series
// that carry every label.
func apiRequests(t *testing.T, a *kube.APIServer, labels ...string) int {
	t.Helper()
	data, err := a.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("the API server's /metrics: %v", err)
	}
	return kube.SumSeries(string(data), "apiserver_request_total", labels...)
}

// dryRuns counts the dry-run writes the API server took: only the
// sidecar's scope check sends them here.
func dryRuns(t *testing.T, a *kube.APIServer) int {
	t.Helper()
	return apiRequests(t, a, `dry_run="All"`)
}

// TestSidecarReprovesItsScopeWhenWhatDecidesItChanges runs the real
// sidecar, scoped, with --scope-recheck=1h, on a real kube-apiserver with
// deploy/ applied, and counts its dry-run probes at the API server.
// Changes that decide nothing (a policy and a binding on Deployments, a
// ClusterRole and binding for others, netready's policy relabelled) send
// no probe. A new policy on pods/status, though it refuses nothing, sends
// one check (3 probes) a few seconds later and one more to confirm, and
// then none. Deleting netready-sidecar-events, the policy itself, holds
// every write within seconds: the watch, not the clock, caught it.
func TestSidecarReprovesItsScopeWhenWhatDecidesItChanges(t *testing.T) {
	d := kube.NewScopedDeploy(t)
	a, ctx := d.A, context.Background()
	kubeconfig := a.Kubeconfig("bound", a.BoundToken(t, d.Self))
	listen, logs, _ := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a",
		"--require-scope", "--scope-recheck", "1h", "--pod-namespace", d.Self.Namespace, "--pod-name", d.Self.Name, "--cni-conf-dir", "")
	if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the scoped sidecar never turned ready: %s\n%s", why, logs.String())
	}
	time.Sleep(5 * time.Second)
	start := dryRuns(t, a)
	if start == 0 {
		t.Fatal("no dry-run request counted at the API server: the count proves nothing")
	}

	adm, rbac := a.Admin.AdmissionregistrationV1(), a.Admin.RbacV1()
	// A policy that refuses nothing.
	policy := func(name, group, resource string) *admissionv1.ValidatingAdmissionPolicy {
		return &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{rule(group, []string{resource}, admissionv1.Update)}},
				Validations:      []admissionv1.Validation{{Expression: "true"}}}}
	}
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(adm.ValidatingAdmissionPolicies().Create(ctx, policy("acme-replicas", "apps", "deployments"), metav1.CreateOptions{}))
	must(adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "acme-replicas"},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "acme-replicas", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}, metav1.CreateOptions{}))
	must(rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "acme-deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}}}}, metav1.CreateOptions{}))
	must(rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "acme-admins"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "acme:admins"}}}, metav1.CreateOptions{}))
	must(adm.ValidatingAdmissionPolicies().Patch(ctx, "netready-sidecar-scope", types.MergePatchType, []byte(`{"metadata":{"labels":{"acme.example/team":"network"}}}`), metav1.PatchOptions{}))
	// Settle (2 s) and spread (up to 5 s) twice over.
	time.Sleep(15 * time.Second)
	if n := dryRuns(t, a) - start; n != 0 {
		t.Errorf("changes that decide nothing of the scope sent %d dry-run probes, want 0", n)
	}

	must(adm.ValidatingAdmissionPolicies().Create(ctx, policy("acme-audit-status", "", "pods/status"), metav1.CreateOptions{}))
	changed := time.Now()
	for dryRuns(t, a)-start < 3 {
		if time.Since(changed) > 20*time.Second {
			t.Fatalf("no scope check within 20 s of a new policy on pods/status (clock: 1h)\n%s", logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The confirmation: 30 s after that check, plus up to 5 s.
	for dryRuns(t, a)-start < 6 {
		if time.Since(changed) > 60*time.Second {
			t.Fatalf("no confirming check within 60 s of a new policy on pods/status: %d probes\n%s", dryRuns(t, a)-start, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(10 * time.Second)
	if n := dryRuns(t, a) - start; n != 6 {
		t.Errorf("one change that decides the scope sent %d dry-run probes, want 6: two checks of one probe per policy", n)
	}

	if err := adm.ValidatingAdmissionPolicies().Delete(ctx, "netready-sidecar-events", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if why := kube.SidecarReadyz(listen, 20*time.Second, http.StatusServiceUnavailable); why != "" {
		t.Fatalf("/readyz 20 s after netready-sidecar-events was deleted = %s, want 503 (clock: 1h)\n%s", why, logs.String())
	}
	if _, why := readyz(t, listen); !strings.Contains(why, "(policy netready-sidecar-events)") {
		t.Errorf("/readyz while held = %q, want it to name netready-sidecar-events", why)
	}
	a.Kubectl(t, "apply", "-k", "../../../deploy", "--server-side")
	if why := kube.SidecarReadyz(listen, 45*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the sidecar did not resume once deploy/ was applied again: %s\n%s", why, logs.String())
	}
	if !strings.Contains(logs.String(), "watching what decides the sidecar's scope") {
		t.Errorf("the sidecar's log does not say it watches what decides its scope:\n%s", logs.String())
	}
}

// TestSidecarRechecksItsScopeOnTheShortClockWithoutTheWatchRBAC: on an
// install whose ClusterRole predates the watch (no list or watch on
// policies and RBAC), the real sidecar starts as fast, says in its log
// that it cannot watch, still holds its writes within seconds of a
// lifted scope on --scope-recheck-unwatched, and does not retry the
// refused requests on client-go's pace.
func TestSidecarRechecksItsScopeOnTheShortClockWithoutTheWatchRBAC(t *testing.T) {
	// Refused requests are in no API server metric by resource: the
	// audit log has them.
	dir := t.TempDir()
	audit, auditLog := kube.AuditArgs(t, dir, kube.AgentUser)
	d := kube.NewScopedDeployWith(t, audit...)
	a, ctx := d.A, context.Background()
	role, err := a.Admin.RbacV1().ClusterRoles().Get(ctx, "netready-sidecar", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var kept []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if r.APIGroups[0] != "admissionregistration.k8s.io" && r.APIGroups[0] != rbacv1.GroupName {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(role.Rules) {
		t.Fatalf("deploy/'s ClusterRole netready-sidecar has no rule to read policies or RBAC: %+v", role.Rules)
	}
	role.Rules = kept
	if _, err := a.Admin.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		if _, err := d.Sidecar.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{}); err != nil && strings.Contains(err.Error(), "forbidden") {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatal("the sidecar's identity can still list ClusterRoles 30 s after its rule was removed")
		}
	}
	refused := func() int {
		data, err := os.ReadFile(auditLog)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(string(data), "\n") {
			var ev struct {
				Stage, Verb    string
				User           struct{ Username string }
				ObjectRef      struct{ Resource string }
				ResponseStatus struct{ Code int }
			}
			if json.Unmarshal([]byte(line), &ev) != nil || ev.Stage != "ResponseComplete" || ev.User.Username != kube.AgentUser || ev.ResponseStatus.Code != http.StatusForbidden {
				continue
			}
			switch ev.ObjectRef.Resource {
			case "validatingadmissionpolicies", "validatingadmissionpolicybindings", "clusterroles", "clusterrolebindings":
				n++
			}
		}
		return n
	}
	before := refused()

	kubeconfig := a.Kubeconfig("bound", a.BoundToken(t, d.Self))
	started := time.Now()
	listen, logs, _ := kube.RunSidecar(t, kubeconfig, t.TempDir(), "node-a",
		"--require-scope", "--scope-recheck-unwatched", "2s", "--pod-namespace", d.Self.Namespace, "--pod-name", d.Self.Name, "--cni-conf-dir", "")
	if why := kube.SidecarReadyz(listen, 30*time.Second, http.StatusOK); why != "" {
		t.Fatalf("the scoped sidecar never turned ready without the watch's RBAC: %s\n%s", why, logs.String())
	}
	for _, want := range []string{"cannot watch what decides the sidecar's scope", "re-checking it by the clock alone"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the sidecar's log does not say %q:\n%s", want, logs.String())
		}
	}
	liftPodScope(t, d)
	if why := kube.SidecarReadyz(listen, 20*time.Second, http.StatusServiceUnavailable); why != "" {
		t.Fatalf("/readyz 20 s after netready-sidecar-scope's binding was deleted, on the 2 s clock = %s, want 503\n%s", why, logs.String())
	}
	// One try of each informer (a watch-list, then a list) before the
	// first refusal stops them all; the next try is --scope-recheck away.
	// client-go alone retries each from 0.8 s, doubling: 5 tries or more
	// each in 20 s.
	time.Sleep(time.Until(started.Add(20 * time.Second)))
	n := refused() - before
	t.Logf("%d refused list or watch requests in 20 s", n)
	if n == 0 || n > 8 {
		t.Errorf("%d refused list or watch requests of the sidecar's in 20 s, want a few (the watch tried, then stopped)", n)
	}
}
